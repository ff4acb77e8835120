// Sandbox: what abox-net gives up once it is set up (link open, sockets
// bound, policy loaded), before it reads the first guest byte. In order:
//
//  1. The io_uring is restricted (IORING_REGISTER_RESTRICTIONS) to the
//     operations listed in sandbox.cc: polls, timeouts and plain I/O on fds
//     the process already has. seccomp never sees what the ring does, so
//     without this a compromised process could open files or make sockets
//     through the ring. No registration (io_uring_register) is allowed after.
//  2. Every capability is dropped: ambient, bounding set (while we still
//     hold CAP_SETPCAP), then effective, permitted and inheritable. The
//     securebits are locked so that uid 0 gains nothing back on execve.
//  3. PR_SET_NO_NEW_PRIVS.
//  4. A seccomp filter (libseccomp) that allows only the syscalls listed in
//     sandbox.cc, each next to the code that needs it; anything else kills
//     the process (SECCOMP_RET_KILL_PROCESS, seen as SIGSYS). io_uring_setup
//     is not on the list: no new ring after startup. socket() is limited to
//     AF_INET, AF_INET6 and AF_UNIX; mmap/mprotect may not ask for PROT_EXEC.
//
// Builds with AddressSanitizer (ABOX_SANITIZE=ON) allow a few more syscalls
// that the sanitizer runtime needs (its leak check at exit): marked as such
// in sandbox.cc, absent from every other build.
//
// Startup code: the error is a message, and the caller exits (status 3)
// rather than run unconfined. `--no-sandbox` skips this for debugging.
#pragma once

#include <liburing.h>

#include <string>
#include <vector>

#include "base/result.h"
#include "io/event_loop.h"

namespace abox::netstack {

// Steps 1 to 4 above, for the process's one loop, before the loop first
// runs. Once it returned ok the process is confined for the rest of its
// life; on an error it may be partly confined (the caller exits).
base::Result<void, std::string> enter_sandbox(io::EventLoop& loop);

// The same in two parts, for a process that must still do one forbidden
// thing before it reads guest bytes (abox-net run --stream removes its
// listening socket's file once the VMM has connected): steps 1 to 3 before
// the loop first runs, step 4 after.
base::Result<void, std::string> lock_ring_and_drop_privileges(io::EventLoop& loop);
base::Result<void, std::string> install_syscall_filter();

// The pieces, for tests.
// The ring restrictions of step 1.
std::vector<io_uring_restriction> ring_restrictions();
// Steps 2 and 3.
base::Result<void, std::string> drop_privileges();

}  // namespace abox::netstack
