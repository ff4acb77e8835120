// CgroupTree: the instances' cgroups, one folder each under one cgroup v2
// folder the helper owns (its root, e.g. /sys/fs/cgroup/abox-1000), for an
// operator who has no delegated subtree of their own.
//
// open() checks the root's parent is cgroup v2, makes the root (0755, root's)
// when it is missing, and enables the memory, cpu and pids controllers for
// its children (in the parent's and the root's cgroup.subtree_control). When
// that cannot be done (cgroup v1 holds a controller, the parent has
// processes of its own) it fails with the reason, and the helper answers
// every cgroup operation with `unavailable` and that reason.
//
// Every operation works relative to the root's fd (openat family, O_NOFOLLOW)
// on a name that check_instance_name() accepted, so a name can never reach
// outside the root. create() is all or nothing: when a limit cannot be
// written the new folder is removed again. move() first checks every pid
// (the process exists, each of its uids is the operator's), then writes
// them; each process is held by a pidfd from before the check to after its
// write, and a process that is gone after its write (so its number may have
// been reused) is reported, not trusted. remove() only removes an empty
// cgroup (the kernel refuses otherwise: busy). At most kMaxCgroups folders
// live under the root (wire.h).
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"
#include "helper/wire.h"

namespace abox::helper {

class CgroupTree {
 public:
  static base::Result<CgroupTree, std::string> open(const std::string& root);

  base::Result<void, WireError> create(std::string_view instance, const CgroupLimits& limits);
  base::Result<void, WireError> move(std::string_view instance, std::span<const pid_t> pids,
                                     uid_t operator_uid);
  base::Result<void, WireError> remove(std::string_view instance);

  // Removes the root when it is empty (at the helper's exit); false when it is not.
  bool remove_root_if_empty();
  const std::string& root() const { return root_; }

 private:
  CgroupTree(std::string root, base::UniqueFd fd) : root_(std::move(root)), fd_(std::move(fd)) {}
  std::string root_;
  base::UniqueFd fd_;  // the root folder
};

// The cgroup limits as the kernel's files spell them ("max", "QUOTA PERIOD").
std::string memory_max_text(const CgroupLimits& limits);
std::string cpu_max_text(const CgroupLimits& limits);
std::string pids_max_text(const CgroupLimits& limits);

}  // namespace abox::helper
