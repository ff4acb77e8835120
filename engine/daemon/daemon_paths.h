// Where the operator's daemon lives: its socket, its lock, its log.
//
//   $XDG_RUNTIME_DIR/abox/           else /run/user/UID/abox (when /run/user/UID
//     daemon.sock   the API (0600)        exists), else /tmp/abox-UID
//     daemon.lock   held (flock) by the one running daemon
//     daemon.log    its stderr when `abox` started it
//
// daemon_paths() makes the folder 0700 when missing (the daemon, and a
// client about to start one, need it); existing_daemon_paths() makes
// nothing, for a client that only asks whether a daemon runs (`abox
// credentials ls`): a read-only command leaves no folder behind. Both refuse
// a folder that is not a real folder owned by this uid with no access for
// group or others (a folder in /tmp someone else made first would let them
// swap the socket).
#pragma once

#include <string>

#include "base/result.h"

namespace abox::engine {

struct DaemonPaths {
  std::string dir, socket, lock, log;
};

base::Result<DaemonPaths, std::string> daemon_paths();
// The same without making the folder: an error naming ENOENT when it is not
// there (so no daemon runs).
base::Result<DaemonPaths, std::string> existing_daemon_paths();

// The folder daemon_paths() would use, chosen the same way, made and checked
// by nothing: for a reader that must not create it (abox doctor).
std::string daemon_runtime_dir();

}  // namespace abox::engine
