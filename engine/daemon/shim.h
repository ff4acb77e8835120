// `abox shim [--again] --root ROOT NAME` (hidden): hosts one detached
// instance, the way containerd's shim hosts one container. The daemon starts
// it; it is no child of the daemon for long:
//
//   1. it forks: the first process exits at once, the second calls setsid()
//      (no terminal, no PDEATHSIG from the daemon), so the instance outlives a
//      daemon that restarts or dies;
//   2. it writes ROOT/NAME/shim.json (its pid and start time), then the line
//      "PID START_TICKS" on its stdout (the daemon's pipe), then points
//      stdin and stdout at /dev/null and stderr at ROOT/NAME/shim.log;
//   3. it reads ROOT/NAME/config.json (`abox run`'s arguments, written by the
//      daemon), builds the instance from them exactly as `abox run` does, and
//      runs one InstanceSupervisor until the instance ends; the command's
//      stdout and stderr go to ROOT/NAME/output.log (RotatingLog);
//      Before anything of the instance starts, the shim moves itself into the
//      instance's cgroup through abox-helper when one answers
//      (instance_cgroup.h: cgroup.json and a "cgroup" event say which, or why
//      not), so abox-net, the broker and QEMU are born inside it;
//   4. SIGTERM or SIGINT stops the instance in order, a second one kills it.
//
// --again: a stopped instance boots once more: its own policy copy, its kept
// writable disk, no --copy-in, and a fresh nonce secret (broker/nonce-secret
// is removed first, so every nonce changes; the per-boot key always does).
// The supervisor's children die with the shim (PDEATHSIG): a shim killed by
// SIGKILL leaves nothing running.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "engine/daemon/instance_cgroup.h"
#include "engine/instance/state_folder.h"

namespace abox::engine {

int run_shim_command(std::span<const std::string_view> args);

// Step 3's cgroup: the calling process into the instance's cgroup through
// abox-helper at helper_socket_path(getuid()), with instance_cgroup_limits();
// writes cgroup.json and a "cgroup" event to the folder either way. Returns
// the record written.
CgroupRecord enter_instance_cgroup(const StateFolder& folder, const std::string& name, unsigned memory_mib,
                                   unsigned cpus, bool may_use_tcg);

}  // namespace abox::engine
