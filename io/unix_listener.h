// listen_unix(): a listening unix stream socket at a path the operator gave
// (--stats-socket, --stream), made the way daemons make theirs.
//
// A path that exists is looked at first (lstat, never followed):
//   - a socket something listens on: refused ("something is already
//     listening on PATH"): a running abox-net is never taken over;
//   - a socket nobody listens on (connect gives ECONNREFUSED: the file a
//     process that is gone left behind, e.g. because the sandbox forbade it
//     to unlink at exit): removed, then bound afresh;
//   - anything else (a file, a directory, a symlink): refused and left as is.
// The probe is a datagram socket: against a live stream listener it fails
// with EPROTOTYPE, so it never lands in that listener's accept queue (a
// VMM's --stream socket would take it for its VMM). Any other connect error
// is an error: the file is only removed when the kernel says nobody is there.
//
// The socket file is mode 0600 from the start (umask 0177 around bind, and
// a chmod for filesystems that ignore it). The fd is non-blocking and
// close-on-exec. Startup code: errors are messages that name the path; the
// caller owns the file from then on (removes it, or leaves it for the next
// start to replace).
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::io {

// `what` names the socket in messages ("stats socket", "stream socket").
base::Result<base::UniqueFd, std::string> listen_unix(const std::string& path, int backlog,
                                                      std::string_view what);

}  // namespace abox::io
