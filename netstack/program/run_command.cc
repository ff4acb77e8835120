#include "netstack/program/run_command.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "base/broker_handoff.h"
#include "base/command_line.h"
#include "base/decimal.h"
#include "base/json.h"
#include "netstack/gateway/guest_dns.h"
#include "netstack/link/pcap_writer.h"
#include "netstack/link/recording_link.h"
#include "netstack/link/stream_link.h"
#include "netstack/link/tap_link.h"
#include "netstack/program/explain_command.h"
#include "netstack/program/host_address_watch.h"
#include "netstack/program/memory_trimmer.h"
#include "netstack/program/process_setup.h"
#include "netstack/program/reload_command.h"
#include "netstack/program/run_namespace.h"
#include "netstack/program/sandbox.h"
#include "netstack/program/stats.h"
#include "netstack/program/stats_server.h"
#include "netstack/stack/guest_stack.h"
#include "netstack/stack/inbound_ports.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net run --policy FILE (--netns NAME|PATH | --tap-fd N | --stream PATH) [options]\n"
    "       abox-net run --policy FILE [options] [--] CMD [ARGS...]\n"
    "\n"
    "Runs the network appliance for one guest: a tap in the guest's network\n"
    "namespace (or a VM's QEMU stream socket), lwIP on one io_uring loop, the\n"
    "DNS gate on the gateway, and admission of every new flow. Stays in the\n"
    "foreground until SIGTERM/SIGINT, until the namespace goes away, or until\n"
    "the VM disconnects.\n"
    "\n"
    "With CMD (like pasta): makes a fresh network namespace whose only way out is\n"
    "this abox-net, with /etc/resolv.conf there naming the gateway, runs CMD in\n"
    "it once the appliance is ready, and ends when CMD ends, with CMD's exit\n"
    "status; what CMD left running is stopped too (SIGTERM, SIGKILL 5 s later).\n"
    "Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN): it makes a network and a\n"
    "mount namespace. Signals sent to abox-net are passed on to CMD; after a\n"
    "SIGTERM, CMD not gone 5 s later is killed (exit status 137).\n"
    "\n"
    "Options:\n"
    "  -p, --policy FILE          the instance's policy (required)\n"
    "      --netns NAME|PATH      create the tap in this namespace (a name under /run/netns,\n"
    "                             or a path such as /proc/PID/ns/net) and configure it;\n"
    "                             needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN)\n"
    "      --tap-fd N             use an already-open tap (configured by its owner)\n"
    "      --stream PATH          create a unix socket at PATH (mode 0600) for one VMM to\n"
    "                             connect to, QEMU's -netdev stream framing (4-byte\n"
    "                             big-endian length, frame); needs no privilege\n"
    "      --events FILE|-        JSON-lines events to FILE, or '-' for stdout (default:\n"
    "                             stderr); with '-' the ready line still comes first\n"
    "      --instance NAME        the instance name in events (default: guest)\n"
    "  -a, --address ADDR/LEN     the guest's address (default 10.0.2.15/24)\n"
    "  -g, --gateway ADDR         the gateway: abox-net itself, the guest's default route and\n"
    "                             its only DNS server (default 10.0.2.2)\n"
    "  -m, --mtu N                the guest link's MTU, 576-65520 (default 65520)\n"
    "      --ifname NAME          the tap's name in the namespace (default eth0; only with\n"
    "                             --netns or CMD)\n"
    "      --broker PATH          hand flows to [[broker]] names to the broker's unix socket\n"
    "                             at PATH (without it, flows to broker names are refused, and\n"
    "                             a warning at start says so)\n"
    "      --pcap FILE            record every frame to and from the guest in FILE (pcap,\n"
    "                             made 0600; a symlink is refused)\n"
    "      --pcap-max-bytes N     stop recording before FILE passes N bytes (K/M/G suffix;\n"
    "                             default 1G)\n"
    "      --stats-socket PATH    serve the live counters, and answers to 'abox-net explain',\n"
    "                             on a unix socket (0600); read them with 'abox-net stats PATH'\n"
    "      --io ring|syscalls     how frames and host sockets are read and written: through\n"
    "                             the io_uring (default), or by a system call each on\n"
    "                             readiness (for comparison, or to rule the ring out)\n"
    "      --ipv6 off|nd|on       default off: every IPv6 frame is dropped; 'nd' answers\n"
    "                             neighbour and router solicitations, so the guest gets an\n"
    "                             address in the instance's own ULA /64 but no IPv6 route;\n"
    "                             'on' also carries IPv6 TCP and UDP flows (admitted as for\n"
    "                             IPv4), serves the DNS gate on the gateway's IPv6 address\n"
    "                             and gives the guest an IPv6 default route and DNS server\n"
    "                             ('tcp': a deprecated name for 'on'; with --netns, --tap-fd\n"
    "                             or --stream; CMD's namespace keeps IPv6 off)\n"
    "      --publish [HOST_ADDR:]HOST_PORT:GUEST_PORT[/udp]\n"
    "                             publish a guest port on the host (repeatable): abox-net\n"
    "                             listens on HOST_ADDR:HOST_PORT (default 127.0.0.1; an IPv6\n"
    "                             address in brackets) and forwards each connection (/udp:\n"
    "                             each peer's datagrams) to the guest's GUEST_PORT. Only\n"
    "                             loopback unless an address is given: 0.0.0.0 (every\n"
    "                             address of this host) is never a default, spell it out.\n"
    "                             The guest's side of a published connection reaches only\n"
    "                             that connection: it is never a way out\n"
    "      --publish-max-connections N\n"
    "                             live connections (TCP) or peers (UDP) per published port,\n"
    "                             1-65535 (default 64); past it a new connection is accepted\n"
    "                             and closed at once, counted (inbound_refused_limit)\n"
    "      --audit                audit mode, whatever the policy's [mode] says: what the\n"
    "                             policy would refuse is let through and logged would_deny\n"
    "                             (reserved ranges and this host's addresses stay refused);\n"
    "                             for learning what a guest needs (abox policy suggest)\n"
    "      --no-sandbox           FOR DEBUGGING ONLY: keep capabilities, skip the seccomp\n"
    "                             filter and the io_uring restrictions (docs/security.md)\n"
    "\n"
    "Prints 'ready ...' on stdout once the guest side is up and the process is\n"
    "sandboxed (with --stream: once the socket listens, so the VMM can connect\n"
    "after; the syscall filter follows when it has; with CMD: nothing, CMD starts\n"
    "instead). SIGUSR1 prints the counters as JSON to stderr. A new policy while it\n"
    "runs: 'abox-net reload SOCKET FILE' (with --stats-socket), or SIGHUP, which\n"
    "rereads the policy file (the same file, written in place; with CMD, SIGHUP\n"
    "goes to CMD: use reload).\n"
    "\n"
    "Exit status: 0 stopped by a signal, the namespace went away or the VM\n"
    "disconnected, 2 usage error, 3 could not start (invalid or unreadable policy,\n"
    "namespace, tap or socket path, no upstream, pcap file or stats socket not\n"
    "usable, no sandbox possible, this host's addresses not readable). With CMD:\n"
    "CMD's status (128+N when signal N ended it), or 122 abox-net died while CMD\n"
    "ran, 125 abox-net could not start (usage, policy, namespace, appliance), 126\n"
    "CMD could not be executed, 127 CMD was not found.\n";

// Runs the loop (signals included) until a VMM connects to the listener.
// Holds nullptr when a signal stopped the loop first.
base::Result<std::unique_ptr<StreamLink>, std::string> wait_for_peer(io::EventLoop& loop,
                                                                     StreamListener& listener,
                                                                     std::size_t mtu) {
  struct AcceptWatch final : io::EventLoop::Watcher {
    void on_ready(std::uint32_t) override { ready = true; }
    bool ready = false;
  } watch;
  const io::EventLoop::Handle handle = loop.watch(listener.fd(), POLLIN, &watch);
  base::Result<std::unique_ptr<StreamLink>, std::string> peer = std::unique_ptr<StreamLink>();
  while (!loop.stopping()) {
    loop.run_once(base::Millis(1000));
    if (!watch.ready) continue;
    watch.ready = false;
    peer = listener.accept(mtu);
    if (!peer.ok() || *peer) break;
  }
  loop.unwatch(handle);
  return peer;
}

// At most 9 digits: no option takes more, and a long run of zeros is a typo.
std::optional<unsigned long> parse_number(std::string_view s, unsigned long lo, unsigned long hi) {
  if (s.size() > 9) return std::nullopt;
  return base::parse_decimal_in<unsigned long>(s, lo, hi);
}

// A byte count with an optional K, M or G (binary) suffix, 1 to 2^50.
std::optional<std::uint64_t> parse_byte_size(std::string_view s) {
  std::uint64_t unit = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'M' || s.back() == 'G')) {
    unit = s.back() == 'K' ? 1ull << 10 : s.back() == 'M' ? 1ull << 20 : 1ull << 30;
    s.remove_suffix(1);
  }
  auto n = parse_number(s, 1, 999'999'999);
  if (!n || *n * unit > (1ull << 50)) return std::nullopt;
  return *n * unit;
}

std::string usage_line(std::string_view message) {
  return base::usage_error_line("abox-net run", message);
}

}  // namespace

base::Result<RunInvocation, RunUsageError> parse_run_options(std::span<const std::string_view> args) {
  static constexpr base::OptionSpec kOptions[] = {
      {"policy", 'p', true},
      {"netns", 0, true},
      {"tap-fd", 0, true},
      {"stream", 0, true},
      {"events", 0, true},
      {"instance", 0, true},
      {"address", 'a', true},
      {"gateway", 'g', true},
      {"mtu", 'm', true},
      {"ifname", 0, true},
      {"broker", 0, true},
      {"pcap", 0, true},
      {"pcap-max-bytes", 0, true},
      {"stats-socket", 0, true},
      {"io", 0, true},
      {"ipv6", 0, true},
      {"no-sandbox", 0, false},
      {"audit", 0, false},
      {"publish", 0, true},
      {"publish-max-connections", 0, true},
  };
  // With a CMD, abox-net's own failures are 125 (CMD's status passes
  // through, as with `abox run`); without, 2.
  const auto dash_dash = std::find(args.begin(), args.end(), std::string_view("--"));
  const bool command_given = dash_dash != args.end() && dash_dash + 1 != args.end();
  auto parsed = base::parse_options(args, kOptions, /*stop_at_positional=*/true);
  if (!parsed.ok())
    return base::Err{RunUsageError{parsed.error(), command_given ? kRunCommandCouldNotStart : 2}};
  RunInvocation run;
  if (parsed->help) {
    run.help = true;
    return run;
  }
  const base::ParsedArgs& a = *parsed;
  run.command = a.positionals;
  const std::vector<std::string>& command = run.command;
  const int usage_exit = command.empty() ? 2 : kRunCommandCouldNotStart;
  auto usage_error = [&](std::string message) {
    return base::Err{RunUsageError{std::move(message), usage_exit}};
  };
  auto bad = [&](std::string_view option, std::string_view value, std::string_view what) {
    return usage_error("--" + std::string(option) + " '" + std::string(value) + "': expected " +
                       std::string(what));
  };

  ApplianceOptions& o = run.options;
  o.sandbox = !a.has("no-sandbox");
  o.audit = a.has("audit");
  o.events_path = a.last("events").value_or("");
  o.pcap_path = a.last("pcap");
  o.stats_socket = a.last("stats-socket");
  o.netns = a.last("netns");
  o.stream_path = a.last("stream");
  if (auto v = a.last("tap-fd")) {
    auto n = parse_number(*v, 0, 1 << 20);
    if (!n) return bad("tap-fd", *v, "a file descriptor number");
    o.tap_fd = static_cast<int>(*n);
  }
  if (o.stream_path && o.stream_path->empty()) return bad("stream", "", "a path for the unix socket");
  if (auto v = a.last("instance")) {
    if (!base::valid_handoff_instance(*v)) return bad("instance", *v, "1 to 64 of A-Z a-z 0-9 . _ -");
    o.instance = *v;
  }
  if (auto v = a.last("address")) {
    std::string_view text = *v;
    auto slash = text.find('/');
    auto addr = policy::IpAddress::parse(text.substr(0, slash));
    auto len = slash == std::string_view::npos ? std::optional<unsigned long>(24)
                                               : parse_number(text.substr(slash + 1), 8, 30);
    if (!addr || !addr->is_v4() || !len)
      return bad("address", *v, "an IPv4 address with a prefix length, like 10.0.2.15/24");
    o.net.guest_address = *addr;
    o.net.prefix_len = static_cast<unsigned>(*len);
  }
  if (auto v = a.last("gateway")) {
    auto addr = policy::IpAddress::parse(*v);
    if (!addr || !addr->is_v4()) return bad("gateway", *v, "an IPv4 address");
    o.net.gateway = *addr;
  }
  if (auto v = a.last("mtu")) {
    auto n = parse_number(*v, 576, 65520);
    if (!n) return bad("mtu", *v, "a number from 576 to 65520");
    o.net.mtu = *n;
  }
  if (auto v = a.last("pcap-max-bytes")) {
    auto n = parse_byte_size(*v);
    if (!n) return bad("pcap-max-bytes", *v, "a size in bytes, like 1048576 or 100M (at most 1048576G)");
    o.pcap_max_bytes = *n;
  }
  if (auto v = a.last("broker")) {
    if (v->empty() || v->size() > 107) return bad("broker", *v, "a unix socket path of 1 to 107 bytes");
    o.broker_path = *v;
  }
  if (auto v = a.last("io")) {
    if (*v != "ring" && *v != "syscalls") return bad("io", *v, "'ring' or 'syscalls'");
    o.io_on_ring = *v == "ring";
  }
  if (auto v = a.last("ipv6")) {
    // 'tcp' named the mode when it carried TCP only; kept for one release.
    if (*v != "off" && *v != "nd" && *v != "on" && *v != "tcp") return bad("ipv6", *v, "'off', 'nd' or 'on'");
    o.ipv6_neighbour_discovery = *v != "off";
    o.ipv6_flows = *v == "on" || *v == "tcp";
    o.ipv6_deprecated_tcp = *v == "tcp";
  }
  for (const std::string& v : a.all("publish")) {
    auto spec = policy::parse_publish_spec(v);
    if (!spec.ok()) return bad("publish", v, policy::describe(spec.error()));
    o.publish.push_back(*spec);
  }
  if (int clash = policy::first_publish_clash(o.publish); clash >= 0)
    return bad("publish", o.publish[static_cast<std::size_t>(clash)].to_string(),
               policy::describe(policy::PublishError::duplicate));
  if (auto v = a.last("publish-max-connections")) {
    auto n = parse_number(*v, 1, 65535);
    if (!n) return bad("publish-max-connections", *v, "a number from 1 to 65535");
    o.publish_max_connections = static_cast<std::uint32_t>(*n);
  }
  const bool ifname_given = a.has("ifname");
  if (auto v = a.last("ifname")) {
    if (v->empty() || v->size() > 15) return bad("ifname", *v, "an interface name of 1 to 15 bytes");
    o.net.ifname = *v;
  }
  auto policy_path = a.last("policy");
  if (!policy_path) return usage_error("--policy FILE is required");
  o.policy_path = *policy_path;
  const int links = int{o.netns.has_value()} + int{o.tap_fd.has_value()} + int{o.stream_path.has_value()};
  if (!command.empty()) {
    if (links != 0)
      return usage_error("CMD runs in a namespace of its own: drop --netns, --tap-fd and --stream");
  } else if (links != 1) {
    return usage_error("exactly one of --netns, --tap-fd or --stream is required (or a CMD to run)");
  }
  if (ifname_given && !o.netns && command.empty()) {
    // Only a tap abox-net creates has a name it chooses; saying one for
    // another link would be silently ignored.
    return usage_error("--ifname applies only with --netns or a CMD");
  }
  return run;
}

int run_run_command(std::span<const std::string_view> args) {
  auto run = parse_run_options(args);
  if (!run.ok()) {
    std::cerr << usage_line(run.error().message);
    return run.error().exit_code;
  }
  if (run->help) {
    std::cout << kUsage;
    return 0;
  }
  const ApplianceOptions& o = run->options;
  const std::vector<std::string>& command = run->command;
  auto loaded = load_policy_for("abox-net run", o.policy_path);
  if (!loaded) return command.empty() ? 3 : kRunCommandCouldNotStart;
  if (!command.empty()) return run_in_new_namespace(o, *loaded, command);
  return run_appliance(o, *loaded);
}

int run_appliance(const ApplianceOptions& o, const LoadedPolicy& loaded) {
  const policy::Policy& policy = *loaded.policy;
  const auto& upstreams = loaded.upstreams;
  const GuestNetConfig& net = o.net;
  if (!policy.brokers().empty() && o.broker_path.empty()) {
    // Said now, not only as refusals when the guest tries.
    std::string names;
    for (const auto& b : policy.brokers()) {
      names += names.empty() ? "" : ", ";
      names += b.name + ":" + std::to_string(b.port);
    }
    std::cerr << "abox-net run: warning: the policy has " << policy.brokers().size() << " [[broker]] binding"
              << (policy.brokers().size() == 1 ? "" : "s") << " (" << names
              << ") and no --broker: flows to them will be refused\n";
  }

  if (o.ipv6_deprecated_tcp) {
    std::cerr << "abox-net run: warning: --ipv6 tcp is deprecated and will go in the next release: it is "
                 "--ipv6 on (IPv6 TCP and UDP, and the DNS gate over IPv6)\n";
  }

  // The link: a tap now, or a stream socket's listener now and its one peer
  // once the VMM connects.
  // Said at start, on stderr and in the start event (and in every
  // would_deny): nothing is refused but reserved ranges.
  const bool audit_on = o.audit || policy.mode().audit;
  if (audit_on) {
    std::cerr << "abox-net run: warning: audit mode ("
              << (o.audit ? std::string("--audit") : policy.mode().where.to_string() + " [mode] audit")
              << "): what the policy would refuse is let through and logged would_deny; reserved ranges and "
                 "this host's addresses stay refused\n";
  }
  std::unique_ptr<Link> link;
  TapLink* tap = nullptr;
  StreamLink* stream = nullptr;  // set once the VMM has connected
  std::unique_ptr<StreamListener> listener;
  if (o.stream_path) {
    auto listening = StreamListener::listen(*o.stream_path);
    if (!listening.ok()) {
      std::cerr << "abox-net run: " << listening.error() << '\n';
      return 3;
    }
    listener = std::move(listening).value();
  } else {
    auto made = o.netns ? TapLink::create_in_netns(*o.netns, net)
                        : TapLink::from_fd(base::UniqueFd(*o.tap_fd), net.mtu);
    if (!made.ok()) {
      std::cerr << "abox-net run: " << made.error() << '\n';
      if (o.netns && made.error().find("an interface named " + net.ifname + " already exists") == 0) {
        // TapLink's own words (tap_link_test pins them): most likely this
        // namespace already has its abox-net.
        std::cerr << "abox-net run: another abox-net is probably serving " << *o.netns << " (its tap is "
                  << net.ifname << "); stop that one first, or give this one another --ifname\n";
      }
      if (o.netns && (!has_effective_capability(CAP_SYS_ADMIN) || !has_effective_capability(CAP_NET_ADMIN))) {
        std::cerr << "abox-net run: --netns needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) to make a tap in "
                     "another namespace; --stream needs no privilege (a VMM connects to a socket abox-net "
                     "makes)\n";
      }
      return 3;
    }
    tap = made->get();
    link = std::move(made).value();
  }
  // Published ports: bound and listening now, before the sandbox (whose
  // filter allows neither bind nor listen) and while a port below 1024 can
  // still be had. Connections wait in the backlog until the stack is up.
  std::vector<PublishedSocket> published;
  if (!o.publish.empty()) {
    auto listening = listen_published(o.publish);
    if (!listening.ok()) {
      std::cerr << "abox-net run: " << listening.error() << '\n';
      return 3;
    }
    published = std::move(listening).value();
  }
  std::optional<PcapWriter> pcap;
  if (o.pcap_path) {
    auto w = PcapWriter::create(*o.pcap_path, o.pcap_max_bytes);
    if (!w.ok()) {
      struct stat st {};
      if (::lstat(o.pcap_path->c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        // O_NOFOLLOW's ELOOP ("Too many levels of symbolic links") says
        // nothing useful: say what is refused and why.
        std::cerr << "abox-net run: --pcap " << *o.pcap_path
                  << " is a symlink, and a symlink is refused (it could point anywhere): give the file "
                     "itself\n";
      } else {
        std::cerr << "abox-net run: --pcap: " << w.error() << '\n';
      }
      return 3;
    }
    pcap.emplace(std::move(w).value());
  }
  std::optional<RecordingLink> recording;
  MemoryProbe memory;

  auto sink = open_events("abox-net run", o.events_path);
  if (!sink) return 3;
  base::EventLog events = sink->log(o.instance);
  base::SystemRandom random;

  try {
    io::EventLoop loop;
    GuestConfig gc;
    gc.gateway = net.gateway;
    gc.guest = net.guest_address;
    gc.prefix_len = net.prefix_len;
    gc.gateway_mac = net.gateway_mac;
    gc.broker_path = o.broker_path;
    gc.instance = o.instance;
    gc.link_on_ring = o.io_on_ring;
    gc.host_io_on_ring = o.io_on_ring;
    gc.ipv6_neighbour_discovery = o.ipv6_neighbour_discovery;
    gc.audit = o.audit;
    gc.ipv6_flows = o.ipv6_flows;
    // Gives back what glibc keeps after a burst of flows, every few seconds.
    MemoryTrimmer trimmer(loop, memory);
    // Before the stack: its inbound flows count themselves in the ports'
    // live counts until the stack destroys them (inbound_ports.h).
    std::unique_ptr<InboundPorts> inbound;
    std::unique_ptr<GuestStack> stack;
    Link* guest_link = nullptr;  // the link, or the recorder wrapped around it
    auto stats = [&] {
      return stack ? run_stats_json(
                         {*stack, *guest_link, memory, pcap ? &*pcap : nullptr, tap, stream, &trimmer})
                   : std::string("{}");
    };
    // The policy file stays open: on SIGHUP it is read again, which the
    // sandbox would not let a path be opened for (reload_command.h).
    PolicyReloader reloader(events, o.policy_path,
                            base::UniqueFd(::open(o.policy_path.c_str(), O_RDONLY | O_CLOEXEC)), !o.sandbox);
    SignalWatch signals(
        loop,
        [&] {
          if (stack) write_stats_line(STDERR_FILENO, stats());
        },
        [&] { reloader.reread_file(); });
    std::unique_ptr<StatsServer> stats_server;
    if (o.stats_socket) {
      auto server = StatsServer::create(
          loop, *o.stats_socket, stats,
          [&](std::string_view args) {
            return stack ? answer_explain(*stack, args, loop.now())
                         : std::string("1\nno guest yet: the VMM has not connected");
          },
          [&](std::string_view source, std::string_view text, base::UniqueFd file) {
            return reloader.apply(source, text, std::move(file));
          });
      if (!server.ok()) {
        std::cerr << "abox-net run: --stats-socket: " << server.error() << '\n';
        return 3;
      }
      stats_server = std::move(server).value();
    }
    base::MonoTime next_pcap_flush = loop.now() + base::Seconds(1);
    io::EventLoop::Registration pcap_flush;
    if (pcap) {
      pcap_flush = loop.add_timer_source({[&] { return next_pcap_flush; },
                                          [&](base::MonoTime now) {
                                            if (now < next_pcap_flush) return;
                                            next_pcap_flush = now + base::Seconds(1);
                                            pcap->flush();
                                          }});
    }
    // The sandbox in two steps: the ring and the privileges now, before the
    // loop first runs; the syscall filter once the link is final (with
    // --stream the listener's socket file is removed after the VMM connects,
    // and the filter forbids unlink). No guest byte is read before both.
    if (o.sandbox) {
      if (auto r = lock_ring_and_drop_privileges(loop); !r.ok()) {
        std::cerr << "abox-net run: cannot enter the sandbox: " << r.error() << '\n';
        return 3;
      }
    }
    // With --events - the events share stdout: the start event, and whatever
    // setup emitted (held by the sink), follow the ready line, since whoever
    // waits for "ready" must read it first. Anywhere else they come first,
    // so that whoever sees "ready" finds the start event already written.
    const bool events_after_ready = sink->on_stdout();
    std::string published_text;  // "127.0.0.1:8080:80 127.0.0.1:5353:53/udp"
    for (const auto& p : o.publish) {
      if (!published_text.empty()) published_text += ' ';
      published_text += p.to_string();
    }
    auto start_event = [&] {
      sink->release();
      events.emit("start", {{"mode", "run"},
                            {"sandbox", o.sandbox},
                            {"policy", policy.source()},
                            {"link", o.stream_path ? "stream" : "tap"},
                            {"guest", net.guest_address.to_string()},
                            {"gateway", net.gateway.to_string()},
                            {"mtu", static_cast<std::uint64_t>(net.mtu)},
                            {"ipv6", !o.ipv6_neighbour_discovery ? "off"
                                     : o.ipv6_flows              ? "on"
                                                                 : "nd"},
                            {"audit", audit_on},
                            {"publish", published_text}});
    };
    if (listener) {
      if (!events_after_ready) start_event();
      std::cout << "ready stream=" << listener->path() << " guest=" << net.guest_address.to_string() << '/'
                << net.prefix_len << " gateway=" << net.gateway.to_string() << " mtu=" << net.mtu
                << std::endl;
      if (events_after_ready) start_event();
      auto peer = wait_for_peer(loop, *listener, net.mtu);
      if (!peer.ok()) {
        std::cerr << "abox-net run: " << peer.error() << '\n';
        return 3;
      }
      if (!*peer) return 0;  // stopped by a signal before the VMM came
      stream = peer->get();
      link = std::move(peer).value();
      listener.reset();  // exactly one peer: the socket file goes, nobody else connects
      events.emit("link", {{"reason", "the VMM connected"}, {"stream", *o.stream_path}});
    }
    guest_link = pcap ? static_cast<Link*>(&recording.emplace(*link, *pcap)) : link.get();
    stack = std::make_unique<GuestStack>(loop, *guest_link, policy, upstreams, events, random, gc);
    reloader.set_stack(stack.get());
    if (!published.empty()) {
      inbound = std::make_unique<InboundPorts>(*stack, std::move(published), o.publish_max_connections);
    }
    // This host's addresses, before the first guest byte and before the
    // syscall filter (a netlink socket): the gate and admission refuse them.
    auto host_watch = HostAddressWatch::start(loop, stack->host_addresses(), events);
    if (!host_watch.ok()) {
      std::cerr << "abox-net run: " << host_watch.error() << '\n';
      return 3;
    }
    // The stack remembers which IPv6 destinations the host can route to
    // (RouteCache); a route change makes it ask again.
    (*host_watch)->on_routes_changed([s = stack.get()] { s->forget_routes(); });
    if (o.sandbox) {
      if (auto r = install_syscall_filter(); !r.ok()) {
        std::cerr << "abox-net run: cannot enter the sandbox: " << r.error() << '\n';
        return 3;
      }
    }
    base::MonoTime next_check = loop.now() + base::Seconds(1);
    io::EventLoop::Registration netns_check;
    if (tap != nullptr) {
      // pasta's way: notice the namespace going away about once a second.
      netns_check =
          loop.add_timer_source({[&] { return next_check; },
                                 [&](base::MonoTime now) {
                                   if (now < next_check) return;
                                   next_check = now + base::Seconds(1);
                                   if (!tap->netns_alive()) {
                                     events.emit("link", {{"reason", "the guest namespace went away"}});
                                     loop.stop();
                                   }
                                 }});
      const std::string ready = "ready guest=" + net.guest_address.to_string() + "/" +
                                std::to_string(net.prefix_len) + " gateway=" + net.gateway.to_string() +
                                " mtu=" + std::to_string(net.mtu) + "\n";
      if (!events_after_ready) start_event();
      if (o.ready_fd >= 0) {
        // run -- CMD: the supervising parent waits for this, not the user.
        if (::write(o.ready_fd, ready.data(), ready.size()) != static_cast<ssize_t>(ready.size())) return 3;
      } else {
        std::cout << ready << std::flush;
      }
      if (events_after_ready) start_event();
    }
    loop.run();
    if (o.stats_at_exit) write_stats_line(STDERR_FILENO, stats());
  } catch (const std::exception& e) {
    std::cerr << "abox-net run: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
