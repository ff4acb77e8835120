#include "engine/cli/run_command.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "base/json.h"
#include "base/random.h"
#include "engine/cli/machine_setup.h"
#include "engine/cli/options.h"
#include "engine/cli/run_detached.h"
#include "engine/cli/terminal_mode.h"
#include "engine/image/image_store.h"
#include "engine/instance/guest_environment.h"
#include "engine/instance/supervisor.h"
#include "engine/layout.h"
#include "engine/vmm/accel_probe.h"
#include "engine/vmm/qemu_microvm.h"
#include "policy/publish_spec.h"

namespace abox::engine {
namespace {

constexpr std::string_view kUsage =
    "usage: abox run [options] [--] CMD [ARGS...]\n"
    "\n"
    "Boots a micro-VM whose only network is its own abox-net (the policy decides\n"
    "every name and flow), starts the broker for the policy's [[broker]] bindings,\n"
    "proves from inside the guest that refusals hold (the self-test), then runs CMD\n"
    "as uid 1000 and streams its stdout and stderr here. Exits with CMD's status;\n"
    "afterwards nothing of the instance is left (--keep keeps its state folder).\n"
    "\n"
    "Options:\n"
    "  -p, --policy FILE        the egress policy (required)\n"
    "      --name NAME          the instance's name (default: run-<random>); its state\n"
    "                           folder is $XDG_STATE_HOME/abox/instances/NAME\n"
    "      --image NAME         the guest image (default: debian when it is built, else minimal,\n"
    "                           which is built on first use)\n"
    "      --cpus N             virtual CPUs (default: 1)\n"
    "  -m, --memory SIZE        guest memory, MiB or with M/G (default: 512M)\n"
    "  -e, --env NAME=VALUE     set a variable in CMD's environment (repeatable)\n"
    "  -w, --workdir DIR        CMD's working directory in the guest (default: /home/agent)\n"
    "  -i, --interactive        forward stdin to CMD (with backpressure; EOF closes it)\n"
    "  -t, --tty                give CMD a terminal in the guest (with -i: this terminal in\n"
    "                           raw mode, its size followed; Ctrl-C and Ctrl-Z reach CMD)\n"
    "      --copy-in HOST[:DIR] copy the host's file or folder HOST into the guest folder DIR\n"
    "                           (default /home/agent) before CMD starts (repeatable)\n"
    "      --disk SIZE          the instance's writable disk with a disk image (default 4G)\n"
    "      --timeout DURATION   stop the instance when CMD runs longer (30s, 5m, 1h)\n"
    "      --idle-timeout DUR   ... or when CMD printed nothing and no frame crossed abox-net for DUR\n"
    "      --credentials FILE   where the keys of the policy's [[broker]] bindings are\n"
    "                           (default: the store of abox credentials); the broker gets\n"
    "                           only those keys, over an fd\n"
    "      --events FILE|-      every event (abox-net's, the broker's, the supervisor's,\n"
    "                           box-guest's) as JSON lines to FILE, or '-' for stderr\n"
    "                           (stdout is CMD's)\n"
    "  -d, --detach             hand the instance to the daemon and print its name once it\n"
    "                           runs (not with --events, --json, --keep; with -i, abox attach\n"
    "                           sends input; with -t, attach gives a terminal); then abox ls,\n"
    "                           logs, events, attach, exec, stop, start, rm\n"
    "      --publish [HOST_ADDR:]HOST_PORT:GUEST_PORT[/udp]\n"
    "                           publish a port of the guest on the host (repeatable): its\n"
    "                           abox-net listens on HOST_ADDR:HOST_PORT (default 127.0.0.1,\n"
    "                           never 0.0.0.0 unless spelled out) and forwards each\n"
    "                           connection to the guest's GUEST_PORT; never a way out for\n"
    "                           the guest (abox-net run --help; docs/netstack.md)\n"
    "      --json               print a summary of the run as one JSON line on stderr at the end\n"
    "      --keep               keep the state folder (events, console, instance.json)\n"
    "      --no-selftest        skip the self-test (a warning says so)\n"
    "      --accel auto|kvm|tcg how QEMU runs the guest (default: auto: KVM when a probe\n"
    "                           shows it boots this kernel, else TCG, with a DEGRADED line)\n"
    "      --boot-timeout DUR   VMM start to box-guest's hello (default: 60s)\n"
    "      --ipv6 off|on        default off: the guest's IPv6 is dropped; on: the guest\n"
    "                           gets an IPv6 address (SLAAC) and route, and its IPv6 TCP\n"
    "                           and UDP go through the same policy as IPv4 (abox-net\n"
    "                           --ipv6 on)\n"
    "\n"
    "Self-test targets (defaults are public addresses nothing reaches from the guest):\n"
    "      --selftest-name NAME          a name the policy refuses\n"
    "      --selftest-address ADDR:PORT  an address no allowed name was answered with (1.1.1.1:443)\n"
    "      --selftest-resolver ADDR:PORT a DNS server that is not the gateway (8.8.8.8:53)\n"
    "      --upstream-ca FILE            the broker also trusts this CA for providers (tests)\n"
    "\n"
    "SIGINT or SIGTERM stops the instance in order (the guest powers off, the VMM\n"
    "is killed after a grace of 3 s); a second one kills it at once.\n"
    "\n"
    "Exit status: CMD's (128+N when a signal ended it); 122 the VMM, abox-net or the\n"
    "broker crashed; 123 the self-test failed; 124 timed out; 125 abox could not start\n"
    "the instance (usage, policy, credentials, image, boot); 126 CMD is not executable;\n"
    "127 CMD was not found; 128+N abox was stopped by signal N.\n"
    "With -d: 0 the instance runs, 125 it could not start (the reason on stderr).\n";

constexpr OptionSpec kOptions[] = {
    {"policy", 'p', true},
    {"name", 0, true},
    {"image", 0, true},
    {"cpus", 0, true},
    {"memory", 'm', true},
    {"env", 'e', true},
    {"workdir", 'w', true},
    {"interactive", 'i', false},
    {"tty", 't', false},
    {"copy-in", 0, true},
    {"disk", 0, true},
    {"idle-timeout", 0, true},
    {"timeout", 0, true},
    {"credentials", 0, true},
    {"events", 0, true},
    {"json", 0, false},
    {"keep", 0, false},
    {"no-selftest", 0, false},
    {"accel", 0, true},
    {"boot-timeout", 0, true},
    {"selftest-name", 0, true},
    {"selftest-address", 0, true},
    {"selftest-resolver", 0, true},
    {"upstream-ca", 0, true},
    {"detach", 'd', false},
    {"publish", 0, true},
    {"ipv6", 0, true},
};

int usage_error(const std::string& message) {
  std::cerr << "abox run: " << message << " (see 'abox run --help')\n";
  return kRunCouldNotStart;
}

std::string random_name() {
  base::SystemRandom r;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string name = "run-";
  std::uint64_t v = r.next_u64();
  for (int i = 0; i < 8; ++i) name += kDigits[(v >> (4 * i)) & 15];
  return name;
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int exit_code_of(const InstanceOutcome& o) {
  using K = InstanceOutcome::Kind;
  switch (o.kind) {
    case K::kExited:
      return o.exit ? (o.exit->signalled ? 128 + static_cast<int>(o.exit->value)
                                         : static_cast<int>(o.exit->value))
                    : 0;
    case K::kCouldNotStart:
      return kRunCouldNotStart;
    case K::kCommandNotStarted:
      if (o.start_failure && o.start_failure->reason == guest::StartFailure::kNotFound) return kRunNotFound;
      if (o.start_failure && o.start_failure->reason == guest::StartFailure::kNotExecutable)
        return kRunNotExecutable;
      return kRunCouldNotStart;
    case K::kSelftestFailed:
      return kRunSelftestFailed;
    case K::kTimedOut:
      return kRunTimedOut;
    case K::kCrashed:
      return kRunCrashed;
    case K::kInterrupted:
      return 128 + o.signal;
  }
  return kRunCouldNotStart;
}

std::string summary_json(const std::string& name, const InstanceOutcome& o, int code) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object()
      .field("name", name)
      .field("outcome", outcome_kind_name(o.kind))
      .field("exit_code", code)
      .field("accel", o.accel);
  if (o.exit) w.field("signalled", o.exit->signalled).field("status", o.exit->value);
  if (!o.reason.empty()) w.field("reason", o.reason);
  w.key("selftest").begin_array();
  for (const auto& r : o.selftest) {
    w.begin_object()
        .field("probe", guest::probe_kind_name(r.kind))
        .field("target", r.target)
        .field("outcome", guest::probe_outcome_name(r.outcome))
        .field("detail", r.detail)
        .end_object();
  }
  w.end_array();
  w.key("ms")
      .begin_object()
      .field("network_ready", o.ms_network_ready)
      .field("vmm_started", o.ms_vmm_started)
      .field("hello", o.ms_hello)
      .field("command_started", o.ms_command_started)
      .field("first_output", o.ms_first_output)
      .field("ended", o.ms_ended)
      .end_object();
  w.field("stdout_bytes", o.stdout_bytes).field("stderr_bytes", o.stderr_bytes);
  w.field("forged_frames", o.forged_frames);
  w.field("unknown_session_frames", o.unknown_session_frames);
  if (o.kept) w.field("state_folder", o.state_folder);
  w.end_object();
  return js;
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr == text.data() || n == 0 || n > 10'000'000) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  std::uint64_t ms = 0;
  if (unit.empty() || unit == "s")
    ms = n * 1000;
  else if (unit == "ms")
    ms = n;
  else if (unit == "m")
    ms = n * 60'000;
  else if (unit == "h")
    ms = n * 3'600'000;
  else
    return std::nullopt;
  return std::chrono::milliseconds(ms);
}

std::optional<unsigned> parse_mebibytes(std::string_view text) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr == text.data() || n == 0) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  if (unit.empty() || unit == "M" || unit == "m" || unit == "MiB") {
  } else if (unit == "G" || unit == "g" || unit == "GiB") {
    n *= 1024;
  } else {
    return std::nullopt;
  }
  if (n > 1024 * 1024) return std::nullopt;
  return static_cast<unsigned>(n);
}

std::span<const OptionSpec> run_options() {
  return kOptions;
}

std::string run_config_from_args(const ParsedArgs& a, InstanceConfig& c, bool local_terminal) {
  auto policy_file = a.last("policy");
  if (!policy_file) return "--policy FILE is required";

  c.name = a.last("name").value_or(random_name());
  if (!valid_instance_name(c.name)) return "--name: use 1-64 of A-Z a-z 0-9 . _ - (not starting with . or -)";
  auto root = default_instances_root();
  if (!root.ok()) return root.error();
  c.instances_root = *root;
  c.policy_file = *policy_file;
  c.credentials_file = a.last("credentials").value_or("");
  c.upstream_ca = a.last("upstream-ca").value_or("");
  c.argv = a.positionals;
  c.workdir = a.last("workdir").value_or("");
  c.attach_stdin = a.has("interactive");
  c.keep = a.has("keep");
  c.selftest = !a.has("no-selftest");
  c.term = env_or_empty("TERM");
  c.lang = env_or_empty("LANG");
  for (const auto& e : a.all("env")) {
    auto entry = parse_env_assignment(e);
    if (!entry.ok()) return entry.error();
    c.user_env.push_back(std::move(entry).value());
  }
  if (auto v = a.last("cpus")) {
    unsigned n = 0;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || ptr != v->data() + v->size() || n < 1 || n > 64) return "--cpus: 1 to 64";
    c.cpus = n;
  }
  if (auto v = a.last("memory")) {
    auto m = parse_mebibytes(*v);
    if (!m || *m < 64) return "--memory " + *v + ": a size of at least 64M, like 512M or 2G";
    c.memory_mib = *m;
  }
  if (auto v = a.last("timeout")) {
    auto d = parse_duration(*v);
    if (!d) return "--timeout " + *v + ": a duration like 30s, 5m, 1h or 500ms";
    c.timeout = d;
  }
  if (auto v = a.last("idle-timeout")) {
    auto d = parse_duration(*v);
    if (!d) return "--idle-timeout " + *v + ": a duration like 10m";
    c.idle_timeout = d;
  }
  if (auto v = a.last("disk")) {
    auto m = parse_mebibytes(*v);
    if (!m || *m < 64) return "--disk " + *v + ": a size of at least 64M, like 4G";
    c.disk_bytes = std::uint64_t{*m} << 20;
  }
  c.tty = a.has("tty");
  if (c.tty) {
    c.window = {24, 80};
    if (local_terminal) {
      if (auto size = terminal_size(c.attach_stdin ? STDIN_FILENO : STDOUT_FILENO))
        c.window = {size->rows, size->cols};
    }
  }
  if (local_terminal && c.tty && c.attach_stdin && ::isatty(STDIN_FILENO) == 0)
    return "-t -i: stdin is not a terminal (leave out -t to forward a pipe or a file)";
  for (const auto& spec : a.all("copy-in")) {
    CopyIn ci;
    auto colon = spec.find(':');
    ci.host_path = spec.substr(0, colon);
    ci.guest_dir = colon == std::string::npos ? std::string(kGuestHome) : spec.substr(colon + 1);
    if (ci.host_path.empty() || ci.guest_dir.empty()) return "--copy-in " + spec + ": HOST_PATH[:GUEST_DIR]";
    if (ci.guest_dir[0] != '/') ci.guest_dir = std::string(kGuestHome) + "/" + ci.guest_dir;
    if (ci.guest_dir.size() > guest::kMaxGuestPath)
      return "--copy-in " + spec + ": the guest path is too long";
    c.copy_in.push_back(std::move(ci));
  }
  if (auto v = a.last("boot-timeout")) {
    auto d = parse_duration(*v);
    if (!d) return "--boot-timeout " + *v + ": a duration like 60s";
    c.boot_timeout = *d;
  }
  if (auto v = a.last("selftest-name")) c.selftest_targets.denied_name = *v;
  if (auto v = a.last("selftest-address")) {
    if (!valid_probe_address(*v)) return "--selftest-address " + *v + ": expected IPV4:PORT";
    c.selftest_targets.direct_address = *v;
  }
  if (auto v = a.last("selftest-resolver")) {
    if (!valid_probe_address(*v)) return "--selftest-resolver " + *v + ": expected IPV4:PORT";
    c.selftest_targets.foreign_resolver = *v;
  }
  std::vector<policy::PublishSpec> published;
  for (const auto& v : a.all("publish")) {
    auto spec = policy::parse_publish_spec(v);
    if (!spec.ok()) return "--publish " + v + ": expected " + std::string(policy::describe(spec.error()));
    published.push_back(*spec);
  }
  if (int clash = policy::first_publish_clash(published); clash >= 0)
    return "--publish " + published[static_cast<std::size_t>(clash)].to_string() + ": expected " +
           std::string(policy::describe(policy::PublishError::duplicate));
  for (const auto& spec : published) c.publish.push_back(spec.to_string());
  std::string accel = a.last("accel").value_or("auto");
  if (accel != "auto" && accel != "kvm" && accel != "tcg") return "--accel: auto, kvm or tcg";
  if (auto v = a.last("ipv6")) {
    if (*v != "off" && *v != "on") return "--ipv6 " + *v + ": off or on";
    c.ipv6 = *v == "on";
  }

  return "";
}

int run_run_command(std::span<const std::string_view> args) {
  auto parsed = parse_options(args, kOptions, /*stop_at_positional=*/true);
  if (!parsed.ok()) return usage_error(parsed.error());
  const ParsedArgs& a = *parsed;
  if (a.help) {
    std::cout << kUsage;
    return 0;
  }
  if (a.positionals.empty()) return usage_error("no command: abox run [options] -- CMD [ARGS...]");
  InstanceConfig c;
  if (auto problem = run_config_from_args(a, c, /*local_terminal=*/!a.has("detach")); !problem.empty())
    return usage_error(problem);
  if (a.has("detach")) return run_detached(args, a);
  std::string accel = a.last("accel").value_or("auto");
  if (auto problem = prepare_machine(c, a.last("image").value_or(""), accel, "abox run", std::cerr);
      !problem.empty()) {
    std::cerr << "abox run: " << problem << '\n';
    return kRunCouldNotStart;
  }
  if (!c.selftest)
    std::cerr << "abox run: WARNING: --no-selftest: the guest's refusals are not proven before CMD runs\n";

  base::UniqueFd events_file;
  int events_fd = -1;
  if (auto ev = a.last("events")) {
    if (*ev == "-") {
      events_fd = STDERR_FILENO;
    } else {
      events_file.reset(::open(ev->c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
      if (!events_file) {
        std::cerr << "abox run: --events " << *ev << ": " << std::strerror(errno) << '\n';
        return kRunCouldNotStart;
      }
      events_fd = events_file.get();
    }
  }

  bool tty_interactive = c.tty && c.attach_stdin;
  ::signal(SIGPIPE, SIG_IGN);  // a reader of our stdout that goes away is an error on write, not our death
  boost::asio::io_context io;
  QemuMicrovm qemu(c.qemu);
  std::optional<InstanceOutcome> outcome;
  std::string name = c.name;
  InstanceSupervisor supervisor(io, std::move(c), qemu, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, events_fd,
                                [&](const InstanceOutcome& o) {
                                  outcome = o;
                                  io.stop();
                                });
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
  int signals_seen = 0;
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int signo) {
      if (ec) return;
      if (++signals_seen == 1) {
        if (::isatty(STDERR_FILENO))
          std::cerr << "\nabox run: stopping " << name << " (again to kill it now)\n";
        supervisor.stop(signo);
      } else {
        supervisor.kill_now();
      }
      wait_signal();
    });
  };
  wait_signal();
  // -t -i: this terminal in raw mode while the instance runs (restored by the
  // destructor on every way out of here), its size followed.
  std::optional<TerminalMode> raw;
  boost::asio::signal_set winch(io);
  std::function<void()> wait_winch = [&] {
    winch.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      if (auto size = terminal_size(STDIN_FILENO)) supervisor.resize(size->rows, size->cols);
      wait_winch();
    });
  };
  if (tty_interactive) {
    raw.emplace(STDIN_FILENO);
    winch.add(SIGWINCH);
    wait_winch();
  }
  supervisor.start();
  io.run();
  raw.reset();
  if (!outcome) {
    std::cerr << "abox run: the instance ended without an outcome\n";
    return kRunCrashed;
  }
  int code = exit_code_of(*outcome);
  if (outcome->kind != InstanceOutcome::Kind::kExited && !outcome->reason.empty())
    std::cerr << "abox run: " << outcome->reason << '\n';
  if (outcome->kept) std::cerr << "abox run: kept " << outcome->state_folder << '\n';
  if (a.has("json")) std::cerr << summary_json(name, *outcome, code) << '\n';
  return code;
}

}  // namespace abox::engine
