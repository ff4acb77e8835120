// CgroupLeftovers: the names of instance cgroups the daemon still has to
// delete through abox-helper, one empty file each in a folder of the
// daemon's runtime dir (DaemonPaths::dir + "/cgroup-leftovers").
//
// Why a folder of its own and not only the instances' cgroup.json: `abox rm`
// removes the state folder, maybe before the cgroup can go (the shim's
// children still dying, or the helper away). The name is added here BEFORE
// the folder can be removed, so a daemon SIGKILLed at any point finds every
// cgroup it may have left: in a state folder whose shim is gone (cgroup.json
// says creating or placed) or here. Both vanish at reboot, as cgroups do.
//
// sweep_cgroups() is one pass: each listed name whose instance does not run
// (is_live) is deleted; `ok` and `not-found` drop the name, `busy` keeps it
// for the next pass (the caller retries on a timer, bounded), anything else
// keeps it until the daemon's next start or next ended instance.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/daemon/instance_cgroup.h"

namespace abox::engine {

class CgroupLeftovers {
 public:
  explicit CgroupLeftovers(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  // Makes the folder (0700) when missing; the name must be a valid instance name.
  base::Result<void, std::string> add(const std::string& name) const;
  void drop(const std::string& name) const;
  // The valid names listed, sorted; anything else in the folder is ignored.
  std::vector<std::string> names() const;

 private:
  std::string dir_;
};

struct SweepResult {
  std::vector<std::string> deleted;  // gone now (or already gone)
  std::vector<std::string> busy;     // still has processes: try again soon
  std::vector<std::string> kept;     // the helper refused or is away: "NAME: why"
  bool done() const { return busy.empty(); }
};

SweepResult sweep_cgroups(CgroupHelper& helper, const CgroupLeftovers& leftovers,
                          const std::function<bool(const std::string&)>& is_live);

}  // namespace abox::engine
