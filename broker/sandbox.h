// The broker's sandbox: what `abox broker` gives up once BrokerService::create
// has done every startup step that needs the filesystem (the policy, the
// keys, the state folder, the CA, the upstream roots, the listening socket,
// the events and stats files), before it reads the first guest byte. A
// broker taken over through its TLS or HTTP parser then holds one instance's
// keys and nothing more: no capability, no new file, no exec, no new kind of
// socket. In order:
//
//  0. The event loop's io_uring (made disabled, io/event_loop.h) is
//     restricted (IORING_REGISTER_RESTRICTIONS) to what the loop does for
//     the broker: polls, their removal, the wait's timeout; no flags. Then
//     it is enabled, and no register call is allowed after (step 2).
//  1. base::drop_privileges(): every capability, the securebits locked,
//     PR_SET_NO_NEW_PRIVS (base/drop_privileges.h, shared with abox-net).
//  2. A seccomp filter (libseccomp) allowing only the system calls listed in
//     sandbox.cc, each beside the code that needs it; anything else kills the
//     process (SECCOMP_RET_KILL_PROCESS: SIGSYS), a syscall of another ABI
//     too. No open/openat, no unlink or rename, no execve, no ptrace, no
//     bind+listen of a new listener (listen is not on the list). socket() is
//     limited to AF_INET and AF_INET6 (the upstream connections and the
//     resolver) and AF_NETLINK with NETLINK_ROUTE (getifaddrs, which the
//     resolver runs on each answer to know this host's addresses: a dump
//     that needs no capability; changing a route needs CAP_NET_ADMIN, which
//     step 1 dropped). mmap and mprotect may not ask for PROT_EXEC.
//
// ASan + UBSan builds (ABOX_SANITIZE=ON) allow what the sanitizer runtime
// needs at exit (LeakSanitizer's check), marked so in sandbox.cc and absent
// from every other build.
//
// What changes under it: the unix socket's file is left behind at exit (the
// next broker on that path replaces a socket nobody accepts on), and the
// stats file is appended to through the fd opened at startup
// (service.h). `abox broker --no-sandbox` skips this, for debugging only.
#pragma once

#include <liburing.h>

#include <string>
#include <vector>

#include "base/result.h"
#include "io/event_loop.h"

namespace abox::broker {

// The ring restrictions of step 0.
std::vector<io_uring_restriction> broker_ring_restrictions();

// Steps 0, 1 and 2, for the broker's loop (not yet run). Irreversible; on
// an error the process may be partly confined and the caller exits
// (status 3) rather than run on.
base::Result<void, std::string> enter_broker_sandbox(io::EventLoop& loop);

}  // namespace abox::broker
