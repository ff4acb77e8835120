// drop_privileges(): what a process that parses untrusted bytes gives up
// before the first of them, shared by abox-net's sandbox (netstack/program/sandbox.h)
// and the broker's (broker/sandbox.h). In order:
//
//  1. Every capability: the ambient set, then the bounding set (while
//     CAP_SETPCAP may still be held), then effective, permitted and
//     inheritable (capset), read back to check each is empty.
//  2. The securebits are set and locked (where the process may: a process
//     that never had CAP_SETPCAP has nothing to lock), so uid 0 gains nothing
//     back on execve or setuid.
//  3. PR_SET_NO_NEW_PRIVS: no execve ever grants privileges again (and a
//     seccomp filter may be installed without CAP_SYS_ADMIN).
//
// Irreversible. On an error the process may be partly confined; the caller
// exits rather than run on. Linux system calls only (no library).
#pragma once

#include <string>

#include "base/result.h"

namespace abox::base {

Result<void, std::string> drop_privileges();

}  // namespace abox::base
