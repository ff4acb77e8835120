#include "netstack/program/run_command.h"

#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "base/broker_handoff.h"
#include "base/json.h"
#include "netstack/gateway/guest_dns.h"
#include "netstack/link/pcap_writer.h"
#include "netstack/link/recording_link.h"
#include "netstack/link/stream_link.h"
#include "netstack/link/tap_link.h"
#include "netstack/program/host_address_watch.h"
#include "netstack/program/memory_trimmer.h"
#include "netstack/program/process_setup.h"
#include "netstack/program/sandbox.h"
#include "netstack/program/stats.h"
#include "netstack/program/stats_server.h"
#include "netstack/stack/guest_stack.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net run --policy FILE (--netns NAME|PATH | --tap-fd N | --stream PATH) [options]\n"
    "\n"
    "Runs the network appliance for one guest: a tap in the guest's network\n"
    "namespace (or a VM's QEMU stream socket), lwIP on one io_uring loop, the\n"
    "DNS gate on the gateway, and admission of every new flow. Stays in the\n"
    "foreground until SIGTERM/SIGINT, until the namespace goes away, or until\n"
    "the VM disconnects.\n"
    "\n"
    "Options:\n"
    "  --policy FILE          the instance's policy (required)\n"
    "  --netns NAME|PATH      create the tap in this namespace (a name under /run/netns, or a path\n"
    "                         such as /proc/PID/ns/net) and configure it\n"
    "  --tap-fd N             use an already-open tap (configured by its owner)\n"
    "  --stream PATH          create a unix socket at PATH (mode 0600) for one VMM to connect to,\n"
    "                         QEMU's -netdev stream framing (4-byte big-endian length, frame)\n"
    "  --events FILE|-        JSON-lines events to FILE, or '-' for stdout (default: stderr)\n"
    "  --instance NAME        the instance name in events (default: guest)\n"
    "  --address ADDR/LEN     the guest's address (default 10.0.2.15/24)\n"
    "  --gateway ADDR         the gateway: abox-net itself, the guest's default route and its\n"
    "                         only DNS server (default 10.0.2.2)\n"
    "  --mtu N                the guest link's MTU, 576-65520 (default 65520)\n"
    "  --ifname NAME          the tap's name in the namespace (default eth0; only with --netns)\n"
    "  --broker PATH          hand flows to [[broker]] names to the broker's unix socket at PATH\n"
    "                         (without it, flows to broker names are refused)\n"
    "  --pcap FILE            record every frame to and from the guest in FILE (pcap, made 0600)\n"
    "  --pcap-max-bytes N     stop recording before FILE passes N bytes (K/M/G suffix; default 1G)\n"
    "  --stats-socket PATH    serve the live counters as JSON on a unix socket (0600); read them\n"
    "                         with 'abox-net stats PATH'\n"
    "  --io ring|syscalls     how frames and host sockets are read and written: through the\n"
    "                         io_uring (default), or by a system call each on readiness (as\n"
    "                         before; for comparison, or to rule the ring out)\n"
    "  --no-sandbox           FOR DEBUGGING ONLY: keep capabilities, skip the seccomp filter and\n"
    "                         the io_uring restrictions (docs/security.md)\n"
    "\n"
    "Prints 'ready ...' on stdout once the guest side is up and the process is\n"
    "sandboxed (with --stream: once the socket listens, so the VMM can connect\n"
    "after; the syscall filter follows when it has). SIGUSR1 prints the counters\n"
    "as JSON to stderr.\n"
    "\n"
    "Exit status: 0 stopped by a signal, the namespace went away or the VM\n"
    "disconnected, 2 usage error, 3 could not start (invalid policy, namespace,\n"
    "tap or socket path, no upstream, pcap file or stats socket not usable, no\n"
    "sandbox possible, this host's addresses not readable).\n";

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

std::optional<unsigned long> parse_number(std::string_view s, unsigned long lo, unsigned long hi) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  unsigned long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned long>(c - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
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

}  // namespace

int run_run_command(std::span<const std::string_view> args) {
  std::optional<std::string> policy_path;
  std::optional<std::string> netns;
  std::optional<int> tap_fd;
  std::optional<std::string> stream_path;
  bool ifname_given = false;
  std::string events_path;
  std::string instance = "guest";
  std::string broker_path;
  GuestNetConfig net;
  std::optional<std::string> pcap_path;
  std::uint64_t pcap_max_bytes = 1ull << 30;
  std::optional<std::string> stats_socket;
  bool sandbox = true;
  bool io_on_ring = true;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--no-sandbox") {
      sandbox = false;
      continue;
    }
    if (i + 1 >= args.size()) {
      std::cerr << "abox-net run: unknown or incomplete option '" << a << "'\n" << kUsage;
      return 2;
    }
    std::string_view v = args[++i];
    auto bad = [&](std::string_view what) {
      std::cerr << "abox-net run: " << a << " '" << v << "': expected " << what << '\n';
      return 2;
    };
    if (a == "--policy") {
      policy_path = std::string(v);
    } else if (a == "--netns") {
      netns = std::string(v);
    } else if (a == "--tap-fd") {
      auto n = parse_number(v, 0, 1 << 20);
      if (!n) return bad("a file descriptor number");
      tap_fd = static_cast<int>(*n);
    } else if (a == "--stream") {
      if (v.empty()) return bad("a path for the unix socket");
      stream_path = std::string(v);
    } else if (a == "--events") {
      events_path = std::string(v);
    } else if (a == "--instance") {
      if (!base::valid_handoff_instance(v)) return bad("1 to 64 of A-Z a-z 0-9 . _ -");
      instance = std::string(v);
    } else if (a == "--address") {
      auto slash = v.find('/');
      auto addr = policy::IpAddress::parse(v.substr(0, slash));
      auto len = slash == std::string_view::npos ? std::optional<unsigned long>(24)
                                                 : parse_number(v.substr(slash + 1), 8, 30);
      if (!addr || !addr->is_v4() || !len)
        return bad("an IPv4 address with a prefix length, like 10.0.2.15/24");
      net.guest_address = *addr;
      net.prefix_len = static_cast<unsigned>(*len);
    } else if (a == "--gateway") {
      auto addr = policy::IpAddress::parse(v);
      if (!addr || !addr->is_v4()) return bad("an IPv4 address");
      net.gateway = *addr;
    } else if (a == "--mtu") {
      auto n = parse_number(v, 576, 65520);
      if (!n) return bad("a number from 576 to 65520");
      net.mtu = *n;
    } else if (a == "--pcap") {
      pcap_path = std::string(v);
    } else if (a == "--pcap-max-bytes") {
      auto n = parse_byte_size(v);
      if (!n) return bad("a size in bytes, like 1048576 or 100M (at most 1048576G)");
      pcap_max_bytes = *n;
    } else if (a == "--stats-socket") {
      stats_socket = std::string(v);
    } else if (a == "--broker") {
      if (v.empty() || v.size() > 107) return bad("a unix socket path of 1 to 107 bytes");
      broker_path = std::string(v);
    } else if (a == "--io") {
      if (v != "ring" && v != "syscalls") return bad("'ring' or 'syscalls'");
      io_on_ring = v == "ring";
    } else if (a == "--ifname") {
      if (v.empty() || v.size() > 15) return bad("an interface name of 1 to 15 bytes");
      net.ifname = std::string(v);
      ifname_given = true;
    } else {
      std::cerr << "abox-net run: unknown option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  const int links = int{netns.has_value()} + int{tap_fd.has_value()} + int{stream_path.has_value()};
  if (!policy_path || links != 1) {
    std::cerr << "abox-net run: --policy and exactly one of --netns, --tap-fd or --stream are required\n"
              << kUsage;
    return 2;
  }
  if (ifname_given && !netns) {
    // Only a tap abox-net creates has a name it chooses; saying one for
    // another link would be silently ignored.
    std::cerr << "abox-net run: --ifname applies only with --netns\n";
    return 2;
  }
  auto loaded = load_policy_for("abox-net run", *policy_path);
  if (!loaded) return 3;
  const policy::Policy& policy = *loaded->policy;
  const auto& upstreams = loaded->upstreams;

  // The link: a tap now, or a stream socket's listener now and its one peer
  // once the VMM connects.
  std::unique_ptr<Link> link;
  TapLink* tap = nullptr;
  StreamLink* stream = nullptr;  // set once the VMM has connected
  std::unique_ptr<StreamListener> listener;
  if (stream_path) {
    auto listening = StreamListener::listen(*stream_path);
    if (!listening.ok()) {
      std::cerr << "abox-net run: " << listening.error() << '\n';
      return 3;
    }
    listener = std::move(listening).value();
  } else {
    auto made =
        netns ? TapLink::create_in_netns(*netns, net) : TapLink::from_fd(base::UniqueFd(*tap_fd), net.mtu);
    if (!made.ok()) {
      std::cerr << "abox-net run: " << made.error() << '\n';
      return 3;
    }
    tap = made->get();
    link = std::move(made).value();
  }
  std::optional<PcapWriter> pcap;
  if (pcap_path) {
    auto w = PcapWriter::create(*pcap_path, pcap_max_bytes);
    if (!w.ok()) {
      std::cerr << "abox-net run: --pcap: " << w.error() << '\n';
      return 3;
    }
    pcap.emplace(std::move(w).value());
  }
  std::optional<RecordingLink> recording;
  MemoryProbe memory;

  auto sink = open_events("abox-net run", events_path);
  if (!sink) return 3;
  base::EventLog events = base::EventLog::to_fd(instance, sink->fd);
  base::SystemRandom random;

  try {
    io::EventLoop loop;
    GuestConfig gc;
    gc.gateway = net.gateway;
    gc.guest = net.guest_address;
    gc.prefix_len = net.prefix_len;
    gc.gateway_mac = net.gateway_mac;
    gc.broker_path = broker_path;
    gc.instance = instance;
    gc.link_on_ring = io_on_ring;
    gc.host_io_on_ring = io_on_ring;
    // Gives back what glibc keeps after a burst of flows, every few seconds.
    MemoryTrimmer trimmer(loop, memory);
    std::unique_ptr<GuestStack> stack;
    Link* guest_link = nullptr;  // the link, or the recorder wrapped around it
    auto stats = [&] {
      return stack ? run_stats_json(
                         {*stack, *guest_link, memory, pcap ? &*pcap : nullptr, tap, stream, &trimmer})
                   : std::string("{}");
    };
    SignalWatch signals(loop, [&] {
      if (stack) write_stats_line(STDERR_FILENO, stats());
    });
    std::unique_ptr<StatsServer> stats_server;
    if (stats_socket) {
      auto server = StatsServer::create(loop, *stats_socket, stats);
      if (!server.ok()) {
        std::cerr << "abox-net run: --stats-socket: " << server.error() << '\n';
        return 3;
      }
      stats_server = std::move(server).value();
    }
    base::MonoTime next_pcap_flush = loop.now() + base::Seconds(1);
    if (pcap) {
      loop.add_timer_source({[&] { return next_pcap_flush; },
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
    if (sandbox) {
      if (auto r = lock_ring_and_drop_privileges(loop); !r.ok()) {
        std::cerr << "abox-net run: cannot enter the sandbox: " << r.error() << '\n';
        return 3;
      }
    }
    events.emit("start", {{"mode", "run"},
                          {"sandbox", sandbox},
                          {"policy", policy.source()},
                          {"link", listener ? "stream" : "tap"},
                          {"guest", net.guest_address.to_string()},
                          {"gateway", net.gateway.to_string()},
                          {"mtu", static_cast<std::uint64_t>(net.mtu)}});
    if (listener) {
      std::cout << "ready stream=" << listener->path() << " guest=" << net.guest_address.to_string() << '/'
                << net.prefix_len << " gateway=" << net.gateway.to_string() << " mtu=" << net.mtu
                << std::endl;
      auto peer = wait_for_peer(loop, *listener, net.mtu);
      if (!peer.ok()) {
        std::cerr << "abox-net run: " << peer.error() << '\n';
        return 3;
      }
      if (!*peer) return 0;  // stopped by a signal before the VMM came
      stream = peer->get();
      link = std::move(peer).value();
      listener.reset();  // exactly one peer: the socket file goes, nobody else connects
      events.emit("link", {{"reason", "the VMM connected"}, {"stream", *stream_path}});
    }
    guest_link = pcap ? static_cast<Link*>(&recording.emplace(*link, *pcap)) : link.get();
    stack = std::make_unique<GuestStack>(loop, *guest_link, policy, upstreams, events, random, gc);
    // This host's addresses, before the first guest byte and before the
    // syscall filter (a netlink socket): the gate and admission refuse them.
    auto host_watch = HostAddressWatch::start(loop, stack->host_addresses(), events);
    if (!host_watch.ok()) {
      std::cerr << "abox-net run: " << host_watch.error() << '\n';
      return 3;
    }
    if (sandbox) {
      if (auto r = install_syscall_filter(); !r.ok()) {
        std::cerr << "abox-net run: cannot enter the sandbox: " << r.error() << '\n';
        return 3;
      }
    }
    base::MonoTime next_check = loop.now() + base::Seconds(1);
    if (tap != nullptr) {
      // pasta's way: notice the namespace going away about once a second.
      loop.add_timer_source({[&] { return next_check; },
                             [&](base::MonoTime now) {
                               if (now < next_check) return;
                               next_check = now + base::Seconds(1);
                               if (!tap->netns_alive()) {
                                 events.emit("link", {{"reason", "the guest namespace went away"}});
                                 loop.stop();
                               }
                             }});
      std::cout << "ready guest=" << net.guest_address.to_string() << '/' << net.prefix_len
                << " gateway=" << net.gateway.to_string() << " mtu=" << net.mtu << std::endl;
    }
    loop.run();
    write_stats_line(STDERR_FILENO, stats());
  } catch (const std::exception& e) {
    std::cerr << "abox-net run: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
