// HostChecks: what `abox doctor` finds out about this host, one item each,
// by trying the thing rather than looking for a file where that is cheap:
//
//   kvm          choose_accel("auto"): /dev/kvm opens AND boots the guest
//                kernel (engine/vmm/accel_probe; its answer is cached)
//   tun          /dev/net/tun opens read-write
//   io_uring     a ring is set up; then one made disabled takes
//                IORING_REGISTER_RESTRICTIONS and is enabled (abox-net's
//                sandbox needs both)
//   seccomp      a forked child sets no_new_privs and loads an allow-all
//                filter
//   userns       a forked child unshares a user and a network namespace
//   cgroup       cgroup v2 mounted with memory, cpu and pids; whether this
//                user may make cgroups under its own (delegation); when not,
//                whether abox-helper makes them
//   qemu         qemu-system-x86_64 found and `-machine help` lists microvm
//   images       the guest kernel is there, and the minimal image is built
//                and current (ImageStore)
//   helper       abox-helper answers `hello` on its socket (helper/client.h)
//   daemon       something accepts on the daemon's socket
//
// Each item is OK, DEGRADED (abox works, at the cost said) or MISSING (abox
// cannot run an instance until the fix said is done). Every probe is bounded:
// children are waited for at most a few seconds, then killed.
#pragma once

#include <string>
#include <vector>

#include "engine/layout.h"

namespace abox::engine {

enum class CheckStatus { kOk, kDegraded, kMissing };
std::string_view status_name(CheckStatus s);  // "OK", "DEGRADED", "MISSING"

struct CheckItem {
  std::string id;     // "kvm", "tun", ... (stable, for --json)
  std::string title;  // "KVM"
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  // what was found
  std::string cost;    // DEGRADED: what it costs
  std::string fix;     // DEGRADED or MISSING: what to do ("" when nothing can be done)
};

struct HostCheckInputs {
  Layout layout;
  std::string cache_dir;      // default_cache_dir()
  std::string images_root;    // ImageStore::default_root()
  std::string helper_socket;  // helper_socket_path(getuid())
  std::string daemon_socket;  // daemon_socket_path()
};

// $XDG_RUNTIME_DIR/abox/daemon.sock, else /run/user/UID/abox/daemon.sock.
std::string daemon_socket_path();

std::vector<CheckItem> run_host_checks(const HostCheckInputs& in);

}  // namespace abox::engine
