#include "engine/doctor/host_checks.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "base/unique_fd.h"
#include "engine/daemon/instance_cgroup.h"
#include "engine/image/image_store.h"
#include "engine/process/child_process.h"
#include "engine/process/pipe_reader.h"
#include "engine/vmm/accel_probe.h"
#include "helper/client.h"

namespace abox::engine {

namespace {

constexpr int kChildTimeoutMs = 5000;

CheckItem ok(std::string id, std::string title, std::string detail) {
  return CheckItem{std::move(id), std::move(title), CheckStatus::kOk, std::move(detail), "", ""};
}
CheckItem degraded(std::string id, std::string title, std::string detail, std::string cost, std::string fix) {
  return CheckItem{std::move(id),     std::move(title), CheckStatus::kDegraded,
                   std::move(detail), std::move(cost),  std::move(fix)};
}
CheckItem missing(std::string id, std::string title, std::string detail, std::string fix) {
  return CheckItem{std::move(id), std::move(title), CheckStatus::kMissing, std::move(detail), "",
                   std::move(fix)};
}

std::string errno_text() {
  return std::strerror(errno);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string user_name() {
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_name;
  return std::to_string(::getuid());
}

// Runs probe() in a forked child; "" when it exited 0, else why it did not
// (the child writes its reason to a pipe). Bounded: killed after kChildTimeoutMs.
std::string in_child(const std::function<std::string()>& probe) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe: " + errno_text();
  base::UniqueFd read_end(p[0]), write_end(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return "fork: " + errno_text();
  if (pid == 0) {
    std::string why = probe();
    if (!why.empty()) [[maybe_unused]]
      auto n = ::write(write_end.get(), why.data(), std::min<size_t>(why.size(), 512));
    ::_exit(why.empty() ? 0 : 1);
  }
  write_end.reset();
  base::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  bool exited = true;
  if (pidfd) {
    pollfd pf{pidfd.get(), POLLIN, 0};
    exited = ::poll(&pf, 1, kChildTimeoutMs) == 1;
  }
  if (!exited) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  char buf[513];
  const ssize_t n = ::read(read_end.get(), buf, sizeof(buf) - 1);
  std::string why = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  if (!exited) return "the probe did not finish within " + std::to_string(kChildTimeoutMs / 1000) + " s";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (why.empty())
    why = WIFSIGNALED(status) ? "the probe died of signal " + std::to_string(WTERMSIG(status))
                              : "the probe failed";
  return why;
}

// Up to 64 KiB of what argv prints on stdout and stderr, within kChildTimeoutMs.
std::string output_of(const std::vector<std::string>& argv) {
  auto out = make_pipe();
  auto null = open_dev_null();
  ChildSpec spec;
  spec.program = argv.at(0);
  spec.argv = argv;
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.fds = {{0, null.get()}, {1, out.write.get()}, {2, out.write.get()}};
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) return "";
  out.write.reset();
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kChildTimeoutMs);
  while (seen.size() < (64u << 10)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out.read.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[4096];
    const ssize_t n = ::read(out.read.get(), buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<std::size_t>(n));
  }
  child->kill_and_reap();
  return seen;
}

CheckItem check_kvm(const HostCheckInputs& in) {
  const std::string kernel = in.layout.kernel_dir + "/vmlinux";
  const std::string cost = "guests run under TCG emulation: boots and commands are many times slower";
  base::UniqueFd kvm(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm) {
    // Kept before anything else runs: user_name() (getpwuid) below may set
    // errno, and argument order is unspecified ("/dev/kvm: Success" for a uid
    // with no passwd entry).
    const int open_error = errno;
    const bool absent = open_error == ENOENT;
    return degraded("kvm", "KVM", "/dev/kvm: " + std::string(std::strerror(open_error)), cost,
                    absent ? "enable virtualization in the firmware and load kvm_intel or kvm_amd"
                           : "add yourself to the kvm group: sudo usermod -aG kvm " + user_name());
  }
  kvm.reset();
  if (::access(in.layout.qemu.c_str(), X_OK) != 0 || ::access(kernel.c_str(), R_OK) != 0) {
    return degraded(
        "kvm", "KVM", "/dev/kvm opens, but it was not probed (no QEMU or no guest kernel to boot)",
        "whether KVM runs the guest is found out on the first abox run", "see the qemu and images items");
  }
  auto choice = choose_accel("auto", in.layout.qemu, kernel, in.cache_dir);
  if (!choice.degraded) return ok("kvm", "KVM", "/dev/kvm boots the guest kernel (" + choice.why + ")");
  return degraded("kvm", "KVM", choice.why, cost,
                  "none on this host: its KVM (nested or paravirtual) cannot run the guest kernel");
}

CheckItem check_tun() {
  base::UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (tun) return ok("tun", "TUN", "/dev/net/tun opens");
  return degraded(
      "tun", "TUN", "/dev/net/tun: " + errno_text(),
      "abox-net cannot serve tap links (--netns, --tap-fd); abox run (QEMU over --stream) does not "
      "need TUN",
      "sudo modprobe tun");
}

CheckItem check_io_uring() {
  std::string disabled = read_text("/proc/sys/kernel/io_uring_disabled");
  while (!disabled.empty() && disabled.back() == '\n') disabled.pop_back();
  io_uring_params params{};
  base::UniqueFd ring(static_cast<int>(::syscall(SYS_io_uring_setup, 4, &params)));
  if (!ring) {
    return missing("io_uring", "io_uring",
                   "io_uring_setup: " + errno_text() +
                       (disabled.empty() ? "" : " (kernel.io_uring_disabled = " + disabled + ")"),
                   "abox-net runs on io_uring: sudo sysctl kernel.io_uring_disabled=0 (or a kernel with "
                   "CONFIG_IO_URING)");
  }
  ring.reset();
  io_uring_params restricted{};
  restricted.flags = IORING_SETUP_R_DISABLED;
  ring.reset(static_cast<int>(::syscall(SYS_io_uring_setup, 4, &restricted)));
  io_uring_restriction r{};
  r.opcode = IORING_RESTRICTION_SQE_OP;
  r.sqe_op = IORING_OP_NOP;
  if (!ring || ::syscall(SYS_io_uring_register, ring.get(), IORING_REGISTER_RESTRICTIONS, &r, 1) != 0 ||
      ::syscall(SYS_io_uring_register, ring.get(), IORING_REGISTER_ENABLE_RINGS, nullptr, 0) != 0) {
    return missing(
        "io_uring", "io_uring", "ring restrictions (IORING_REGISTER_RESTRICTIONS): " + errno_text(),
        "a kernel of 5.10 or later: abox-net's sandbox restricts its ring and will not run without");
  }
  return ok("io_uring", "io_uring", "rings and their restrictions work");
}

CheckItem check_seccomp() {
  std::string why = in_child([]() -> std::string {
    sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog prog{1, allow};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "PR_SET_NO_NEW_PRIVS: " + errno_text();
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return "seccomp filter: " + errno_text();
    return "";
  });
  if (why.empty()) return ok("seccomp", "seccomp", "a filter loads (no_new_privs, SECCOMP_MODE_FILTER)");
  return missing("seccomp", "seccomp", why,
                 "a kernel with CONFIG_SECCOMP_FILTER: abox-net and the broker will not run unconfined");
}

// abox-net keeps the user and groups it was started with (it drops
// capabilities only), so a ping socket this process can make is one it can
// make in the same network namespace.
CheckItem check_ping() {
  const int protocol = int{IPPROTO_ICMP};
  base::UniqueFd ping(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, protocol));
  if (ping) return ok("ping", "ping", "ping sockets open: echo from the guest is relayed (rules with icmp)");
  std::string range = read_text("/proc/sys/net/ipv4/ping_group_range");
  while (!range.empty() && (range.back() == '\n' || range.back() == '\t')) range.pop_back();
  for (char& c : range)
    if (c == '\t') c = ' ';
  return degraded(
      "ping", "ping",
      "socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP): " + errno_text() +
          (range.empty()
               ? ""
               : " (net.ipv4.ping_group_range = " + range + ", group " + std::to_string(::getgid()) + ")"),
      "ping not relayed: echo to names whose rule allows icmp is refused (the guest's ping says "
      "\"Packet filtered\")",
      "sudo sysctl -w net.ipv4.ping_group_range=\"0 2147483647\" (in the network namespace abox-net "
      "runs in)");
}

CheckItem check_userns() {
  std::string why = in_child([]() -> std::string {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return "unshare(user, net): " + errno_text();
    return "";
  });
  if (why.empty())
    return ok("userns", "user namespaces", "a user and network namespace of your own can be made");
  std::string max = read_text("/proc/sys/user/max_user_namespaces");
  while (!max.empty() && max.back() == '\n') max.pop_back();
  return degraded("userns", "user namespaces",
                  why + (max.empty() ? "" : " (user.max_user_namespaces = " + max + ")"),
                  "no network namespace of your own, so no tap from abox-helper; abox run (QEMU over "
                  "--stream) does not need one",
                  "sudo sysctl user.max_user_namespaces=10000 (and kernel.unprivileged_userns_clone=1 where "
                  "it exists)");
}

struct HelperState {
  bool reachable = false;
  bool cgroups = false;
  std::string detail;
};

HelperState probe_helper(const std::string& socket) {
  HelperState h;
  auto c = helper::HelperClient::connect(socket, std::chrono::seconds(3));
  if (!c.ok()) {
    h.detail = c.error().to_string();
    return h;
  }
  auto hello = c->hello();
  if (!hello.ok()) {
    h.detail = hello.error().to_string();
    return h;
  }
  h.reachable = true;
  h.cgroups = hello->cgroups;
  return h;
}

CheckItem check_helper(const HostCheckInputs& in, const HelperState& h) {
  if (h.reachable) {
    return ok(
        "helper", "abox-helper",
        "answers at " + in.helper_socket + (h.cgroups ? " (cgroups: available)" : " (cgroups: unavailable)"));
  }
  if (::getuid() == 0) {
    return ok("helper", "abox-helper",
              "not needed: abox runs as root here (the helper serves one operator who is not root)");
  }
  return degraded("helper", "abox-helper", "not reachable at " + in.helper_socket + ": " + h.detail,
                  "no cgroup limits for instances, and no taps (QEMU over --stream, "
                  "what abox run uses, needs neither)",
                  "sudo abox-helper --operator " + user_name() + " (docs/helper.md: a systemd unit)");
}

// The cgroup2 mount point, from /proc/self/mountinfo ("" when none).
std::string cgroup2_mount() {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    head >> id >> parent >> dev >> root >> mount;
    return mount;
  }
  return "";
}

bool has_word(const std::string& list, std::string_view word) {
  std::istringstream s(list);
  std::string w;
  while (s >> w) {
    if (w == word) return true;
  }
  return false;
}

// What the daemon's instances will really get: a cgroup with limits exactly
// when abox-helper answers with cgroups available (instance_cgroup.h). A
// subtree delegated to the user is reported but not used by abox.
CheckItem check_cgroup(const HelperState& h) {
  const char* title = "cgroup v2";
  if (h.cgroups) {
    const helper::CgroupLimits l = instance_cgroup_limits(0, 0, false);
    return ok("cgroup", title,
              "each instance gets a cgroup from abox-helper: memory.max = --memory + " +
                  std::to_string(kCgroupMemoryOverheadMib) + " MiB (+ " + std::to_string(kCgroupTcgCacheMib) +
                  " MiB unless --accel kvm), cpu.max = --cpus + " + std::to_string(kCgroupCpuOverhead) +
                  ", pids.max = " + std::to_string(l.pids_max.value_or(0)));
  }
  const std::string no_limits = "instances run without memory, CPU and process-count limits (no cgroup)";
  const std::string mount = cgroup2_mount();
  if (mount.empty()) {
    return degraded("cgroup", title, "no cgroup v2 mount", no_limits,
                    "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)");
  }
  const std::string controllers = read_text(mount + "/cgroup.controllers");
  std::string lacking;
  for (std::string_view c : {"memory", "cpu", "pids"}) {
    if (!has_word(controllers, c)) lacking += (lacking.empty() ? "" : ", ") + std::string(c);
  }
  if (!lacking.empty()) {
    return degraded("cgroup", title,
                    "cgroup v2 at " + mount + " lacks " + lacking + " (bound to cgroup v1 on this host)",
                    no_limits, "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2 only)");
  }
  if (::getuid() == 0) {
    return degraded("cgroup", title,
                    "memory, cpu and pids, but abox-helper serves only an operator who is not root, and "
                    "root's daemon makes no cgroups itself",
                    no_limits, "run abox as your own user, with abox-helper --operator USER");
  }
  if (h.reachable) {
    return degraded(
        "cgroup", title,
        "memory, cpu and pids here, but abox-helper answers cgroups=unavailable (its log says why)",
        no_limits, "fix abox-helper's --cgroup-root (docs/helper.md) and restart it");
  }
  // Delegation: a folder on the way from this process's cgroup up to the
  // mount that this user may make cgroups in. abox does not use it (only
  // the helper's cgroups); said so that nobody expects limits from it.
  std::string own;
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("0::", 0) == 0) own = line.substr(3);
    }
  }
  std::string delegated;
  for (std::string path = own; !path.empty();) {
    const std::string dir = mount + (path == "/" ? "" : path);
    if (::access(dir.c_str(), W_OK) == 0 && ::access((dir + "/cgroup.subtree_control").c_str(), W_OK) == 0) {
      delegated = dir;
      break;
    }
    if (path == "/") break;
    const auto slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return degraded("cgroup", title,
                  "memory, cpu and pids, but abox-helper is not reachable" +
                      (delegated.empty() ? std::string()
                                         : " (" + delegated + " is delegated to you; abox does not use it)"),
                  no_limits, "start abox-helper (see the abox-helper item)");
}

CheckItem check_qemu(const Layout& layout) {
  if (layout.qemu.empty()) {
    return missing("qemu", "QEMU", "qemu-system-x86_64 not found (ABOX_QEMU, PATH)",
                   "sudo apt-get install qemu-system-x86");
  }
  if (::access(layout.qemu.c_str(), X_OK) != 0) {
    return missing("qemu", "QEMU", layout.qemu + ": " + errno_text(),
                   "sudo apt-get install qemu-system-x86, or point ABOX_QEMU at a qemu-system-x86_64");
  }
  const std::string machines = output_of({layout.qemu, "-machine", "help"});
  if (machines.find("microvm") == std::string::npos) {
    return missing("qemu", "QEMU", layout.qemu + " has no microvm machine",
                   "a QEMU of 4.2 or later built with microvm (Debian's qemu-system-x86)");
  }
  return ok("qemu", "QEMU", layout.qemu + " with microvm");
}

CheckItem check_images(const HostCheckInputs& in) {
  const std::string kernel = in.layout.kernel_dir + "/vmlinux";
  if (::access(kernel.c_str(), R_OK) != 0) {
    return missing("images", "images", "no guest kernel at " + kernel,
                   "scripts/setup.sh (it fetches and unpacks Debian's kernel), or set ABOX_GUEST_KERNEL_DIR");
  }
  ImageStore store(in.images_root, in.layout);
  switch (store.freshness("minimal")) {
    case ImageFreshness::kCurrent: {
      auto info = store.find("minimal");
      return ok("images", "images",
                "minimal is built and current" + (info.ok() ? " (" + info->built + ")" : std::string()));
    }
    case ImageFreshness::kStale:
      return degraded("images", "images", "minimal is built but an input changed",
                      "the next abox run rebuilds it first", "abox image build minimal");
    case ImageFreshness::kMissing:
      break;
  }
  return degraded("images", "images", "minimal is not built (" + in.images_root + ")",
                  "the first abox run builds it first", "abox image build minimal");
}

// Printable ASCII of what a peer sent, at most 120 characters, for a message.
std::string quoted(std::string_view bytes) {
  std::string out;
  for (char c : bytes.substr(0, 120)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (bytes.size() > 120) out += "...";
  return out;
}

}  // namespace

std::string_view status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::kOk:
      return "OK";
    case CheckStatus::kDegraded:
      return "DEGRADED";
    case CheckStatus::kMissing:
      return "MISSING";
  }
  return "?";
}

namespace {
constexpr std::string_view kDaemonCost =
    "abox run -d and the fleet commands start it on first use (and say so); abox run works in the foreground";

}  // namespace

// The daemon, asked for real: its socket folder as the daemon would check
// it, then a `ping` of the API (docs/api.md), bounded by kDaemonAnswerMs.
CheckItem check_daemon(const HostCheckInputs& in) {
  constexpr int kDaemonAnswerMs = 3000;
  const std::string& dir = in.daemon_dir;
  const std::string path = dir + "/daemon.sock";
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return degraded("daemon", "daemon", dir + ": " + errno_text(), "no detached instances (abox run -d)",
                      "XDG_RUNTIME_DIR must be a folder of yours");
    }
    return degraded("daemon", "daemon", "not running (no " + dir + " yet)", std::string(kDaemonCost),
                    "none needed; or start it now: abox daemon");
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    const bool fixable = S_ISDIR(st.st_mode) && st.st_uid == ::getuid();
    return degraded("daemon", "daemon",
                    dir + " is not a folder of yours with mode 700: the daemon refuses to use it",
                    "no detached instances (abox run -d) until it is fixed",
                    fixable ? "chmod 700 " + dir : "remove " + dir + " (abox makes it again, mode 700)");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return degraded("daemon", "daemon", path + " is too long for a unix socket",
                    "no detached instances (abox run -d)", "set XDG_RUNTIME_DIR to a shorter folder");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return degraded("daemon", "daemon", "socket: " + errno_text(), std::string(kDaemonCost), "");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    if (e == ENOENT) {
      return degraded("daemon", "daemon", "not running (nothing at " + path + ")", std::string(kDaemonCost),
                      "none needed; or start it now: abox daemon");
    }
    if (e == ECONNREFUSED) {
      return degraded("daemon", "daemon", "not running (" + path + " is left from one that ended)",
                      std::string(kDaemonCost),
                      "none needed: the next daemon replaces it; or start it now: abox daemon");
    }
    if (e != EAGAIN) {
      return degraded("daemon", "daemon", path + ": " + std::string(std::strerror(e)),
                      std::string(kDaemonCost), "");
    }
    // EAGAIN: its backlog is full; the ping below times out the same way.
  }
  static constexpr std::string_view kPing = "{\"v\":1,\"id\":1,\"op\":\"ping\"}\n";
  std::string answer;
  bool line_done = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDaemonAnswerMs);
  std::size_t sent = 0;
  bool timed_out = false;
  while (!line_done && answer.size() <= kMaxDaemonAnswer) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    if (left <= 0) {
      // Decided here, not by reading the clock again after the loop: the
      // milliseconds left are rounded down, so the loop can end a fraction
      // of a millisecond before the deadline.
      timed_out = true;
      break;
    }
    pollfd p{fd.get(), static_cast<short>(sent < kPing.size() ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    if (sent < kPing.size()) {
      const ssize_t n = ::send(fd.get(), kPing.data() + sent, kPing.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
      if (n > 0) sent += static_cast<std::size_t>(n);
      continue;
    }
    char buf[4096];
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
    if (const auto nl = answer.find('\n'); nl != std::string::npos) {
      answer.resize(nl);
      line_done = true;
    }
  }
  if (timed_out) {
    return degraded(
        "daemon", "daemon",
        path + " accepts connections but did not answer a ping within " +
            std::to_string(kDaemonAnswerMs / 1000) + " s",
        "the fleet commands wait on it and fail",
        "stop what listens there (ss -xlp src " + path +
            " shows its pid: kill PID; the instances run on), then any fleet command starts a new one");
  }
  return judge_daemon_answer(
      line_done ? std::string_view(answer) : std::string_view(answer).substr(0, kMaxDaemonAnswer + 1),
      in.abox_version, path);
}

CheckItem judge_daemon_answer(std::string_view answer, std::string_view abox_version,
                              const std::string& socket) {
  const std::string stop_it =
      "stop it (kill PID; the instances run on): the next fleet command starts this abox's daemon";
  auto odd = [&](const std::string& what) {
    return degraded("daemon", "daemon", socket + " " + what, "the fleet commands cannot use it",
                    "stop what listens there (ss -xlp src " + socket +
                        " shows its pid): the next fleet command starts the daemon");
  };
  if (answer.empty()) return odd("closed the connection without answering a ping");
  if (answer.size() > kMaxDaemonAnswer)
    return odd("answered a ping with more than " + std::to_string(kMaxDaemonAnswer) +
               " bytes and no newline");
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(answer, ec);
  if (ec || !v.is_object()) return odd("answered a ping with something not of the API: " + quoted(answer));
  const auto& o = v.get_object();
  const auto* id = o.if_contains("id");
  const auto* ok_field = o.if_contains("ok");
  if (id == nullptr || !id->is_int64() || ok_field == nullptr || !ok_field->is_bool())
    return odd("answered a ping with something not of the API: " + quoted(answer));
  if (!ok_field->get_bool()) {
    const auto* e = o.if_contains("error");
    const std::string why = e != nullptr && e->is_string() ? quoted(e->get_string()) : "no reason given";
    return degraded("daemon", "daemon", "refused a ping: " + why, "the fleet commands cannot use it",
                    why.find("version") != std::string::npos
                        ? stop_it
                        : "run abox as the user the daemon runs for (its socket accepts only that uid)");
  }
  if (id->get_int64() != 1) return odd("answered a ping with another request's id: " + quoted(answer));
  const auto* api = o.if_contains("api");
  const auto* version = o.if_contains("version");
  const auto* pid = o.if_contains("pid");
  if (api == nullptr || !api->is_int64() || version == nullptr || !version->is_string())
    return odd("answered a ping without its API and version: " + quoted(answer));
  const std::string pid_text = pid != nullptr && pid->is_int64() ? std::to_string(pid->get_int64()) : "PID";
  const std::string running = "running (pid " + pid_text + ")";
  std::string stop = stop_it;
  if (const auto at = stop.find("PID"); at != std::string::npos) stop.replace(at, 3, pid_text);
  if (api->get_int64() != 1) {
    return degraded("daemon", "daemon",
                    running + " but speaks API " + std::to_string(api->get_int64()) + "; this abox speaks 1",
                    "the fleet commands cannot use it", stop);
  }
  const std::string theirs = quoted(version->get_string());
  if (theirs != abox_version) {
    return degraded("daemon", "daemon",
                    running + ", version " + theirs + "; this abox is " + std::string(abox_version),
                    "the commands of this abox talk to a daemon of another version", stop);
  }
  std::string detail = running + ", version " + theirs + ", API 1";
  if (const auto* n = o.if_contains("instances"); n != nullptr && n->is_int64())
    detail += ", " + std::to_string(n->get_int64()) + " instance(s) running";
  return ok("daemon", "daemon", detail);
}

std::vector<CheckItem> run_host_checks(const HostCheckInputs& in) {
  const HelperState helper = probe_helper(in.helper_socket);
  return {
      check_kvm(in),        check_tun(),
      check_io_uring(),     check_seccomp(),
      check_userns(),       check_ping(),
      check_cgroup(helper), check_qemu(in.layout),
      check_images(in),     check_helper(in, helper),
      check_daemon(in),
  };
}

}  // namespace abox::engine
