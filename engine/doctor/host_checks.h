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
//   ping         a ping socket (AF_INET, SOCK_DGRAM, IPPROTO_ICMP) opens:
//                net.ipv4.ping_group_range holds this user's group, so
//                abox-net (same user, same namespace) relays echo; else
//                DEGRADED: ping not relayed
//   cgroup       what the daemon's instances will get: OK only when
//                abox-helper answers cgroups=available (each instance then
//                gets a cgroup with limits); else DEGRADED with the cause
//                (no cgroup v2, controllers bound to v1, root, no helper,
//                the helper's own refusal)
//   qemu         qemu-system-x86_64 found and `-machine help` lists microvm
//   images       the guest kernel is there, and the minimal image is built
//                and current (ImageStore)
//   helper       abox-helper answers `hello` on its socket (helper/client.h)
//   daemon       the daemon answers the API's versioned `ping` (docs/api.md)
//                on its socket: API 1, and the version of this abox
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
  std::string daemon_dir;     // daemon_runtime_dir(): daemon.sock is in it
  std::string abox_version;   // this abox's: the daemon should run the same
};

std::vector<CheckItem> run_host_checks(const HostCheckInputs& in);

// The daemon item alone (run_host_checks' last): in.daemon_dir and
// in.abox_version are all it reads. A ping answered within 3 s, or DEGRADED.
CheckItem check_daemon(const HostCheckInputs& in);

// The daemon item from what its socket answered to
// {"v":1,"id":1,"op":"ping"}: `answer` is the first line (without its
// newline), at most kMaxDaemonAnswer bytes, "" when nothing came. OK when it
// is a JSON object with id 1, ok true, api 1 and version abox_version;
// otherwise DEGRADED, saying what came instead and the fix. `socket` is only
// quoted in the texts.
inline constexpr std::size_t kMaxDaemonAnswer = 64 * 1024;
CheckItem judge_daemon_answer(std::string_view answer, std::string_view abox_version,
                              const std::string& socket);

}  // namespace abox::engine
