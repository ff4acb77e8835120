// `abox-net run [options] -- CMD [ARGS...]`: the quickest way to try a
// policy on any program, as pasta runs a command. No `ip netns add`, no
// hand-written resolv.conf.
//
// Three processes, so that the appliance keeps its sandbox and nothing that
// parses guest bytes ever waits on children:
//   supervisor (this process, never sandboxed, parses nothing from the guest)
//     ├─ CMD's process: unshares a network and a mount namespace, makes its
//     │  mounts private, bind-mounts a resolv.conf naming the gateway over
//     │  /etc/resolv.conf, says it is ready, waits for "go", execs CMD
//     └─ the appliance: `run --netns /proc/CMD/ns/net` exactly as documented,
//        in a process group of its own (a Ctrl-C at the terminal goes to CMD,
//        not to the network under it), its ready line written to a pipe
// CMD starts only once the appliance is ready (deny first: CMD never sees a
// network without the policy). When CMD ends, what it started and left
// running is stopped (SIGTERM, SIGKILL after 5 s: the supervisor is the
// subreaper of CMD's tree, so every orphan of it is its child, never
// init's), then the appliance (the same), and the supervisor exits with
// CMD's status. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the supervisor
// by a process are passed on to CMD; the same from the terminal already
// reached CMD, which is in the terminal's foreground group, and is not sent
// twice. A SIGTERM from a process also bounds the wait: CMD not gone 5 s
// later gets SIGKILL (the exit status is then 137). If the appliance dies
// while CMD runs, CMD gets SIGTERM (SIGKILL after 5 s) and the exit status
// is 122. If the supervisor dies, the kernel kills CMD and the appliance
// (parent-death signals).
//
// Needs root, or CAP_SYS_ADMIN and CAP_NET_ADMIN (to make the namespaces
// and to make the tap in one). Unprivileged user namespaces are not used:
// the appliance would have to stay inside CMD's user namespace, where it
// cannot return to the host's network namespace to reach the internet.
#pragma once

#include <string>
#include <vector>

#include "netstack/program/process_setup.h"
#include "netstack/program/run_command.h"

namespace abox::netstack {

// Exit codes of `abox-net run -- CMD` besides CMD's own status (0-255,
// 128+N for a signal), the same as `abox run`'s.
enum RunCommandExitCode : int {
  kRunCommandApplianceDied = 122,  // the appliance exited while CMD ran
  kRunCommandCouldNotStart = 125,  // usage, policy, namespace, appliance
  kRunCommandNotExecutable = 126,  // CMD was found but could not be executed
  kRunCommandNotFound = 127,       // CMD was not found
};

// options: the appliance's, without a link (this makes it). command: CMD
// and its arguments, at least one. Returns the exit status.
int run_in_new_namespace(const ApplianceOptions& options, const LoadedPolicy& policy,
                         const std::vector<std::string>& command);

}  // namespace abox::netstack
