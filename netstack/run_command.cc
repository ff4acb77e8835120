#include "netstack/run_command.h"

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "base/broker_handoff.h"
#include "base/json.h"
#include "netstack/guest_dns.h"
#include "netstack/guest_stack.h"
#include "netstack/lwip/abox_lwip.h"
#include "netstack/process_setup.h"
#include "netstack/tap_link.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net run --policy FILE (--netns NAME|PATH | --tap-fd N) [options]\n"
    "\n"
    "Runs the network appliance for one guest: a tap in the guest's network\n"
    "namespace, lwIP on one io_uring loop, the DNS gate on the gateway, and\n"
    "admission of every new flow. Stays in the foreground until SIGTERM/SIGINT\n"
    "or until the namespace goes away.\n"
    "\n"
    "Options:\n"
    "  --policy FILE          the instance's policy (required)\n"
    "  --netns NAME|PATH      create the tap in this namespace (a name under /run/netns, or a path\n"
    "                         such as /proc/PID/ns/net) and configure it\n"
    "  --tap-fd N             use an already-open tap (configured by its owner)\n"
    "  --events FILE|-        JSON-lines events to FILE, or '-' for stdout (default: stderr)\n"
    "  --instance NAME        the instance name in events (default: guest)\n"
    "  --address ADDR/LEN     the guest's address (default 10.0.2.15/24)\n"
    "  --gateway ADDR         the gateway: abox-net itself, the guest's default route and its\n"
    "                         only DNS server (default 10.0.2.2)\n"
    "  --mtu N                the guest link's MTU, 576-65520 (default 65520)\n"
    "  --ifname NAME          the tap's name in the namespace (default eth0)\n"
    "  --broker PATH          hand flows to [[broker]] names to the broker's unix socket at PATH\n"
    "                         (without it, flows to broker names are refused)\n"
    "\n"
    "Prints 'ready ...' on stdout once the guest side is up. SIGUSR1 prints the\n"
    "counters as JSON to stderr.\n"
    "\n"
    "Exit status: 0 stopped by a signal or the namespace went away, 2 usage error,\n"
    "3 could not start (invalid policy, namespace or tap, no upstream).\n";

void write_counters(const GuestStack& s, const Link& link) {
  const auto& c = s.counters();
  const auto& g = s.dns().gate().counters();
  const auto& l = link.counters();
  std::string out;
  base::JsonWriter w(out);
  w.begin_object()
      .field("frames_in", l.frames_in)
      .field("frames_out", l.frames_out)
      .field("frames_dropped_ipv6", c.frames_dropped_ipv6)
      .field("frames_dropped_other", c.frames_dropped_other)
      .field("frames_dropped_spoofed", c.frames_dropped_spoofed)
      .field("frames_dropped_fragment", c.frames_dropped_fragment)
      .field("icmp_not_for_gateway", abox_lwip_counters()->icmp_not_for_netif)
      .field("frames_dropped_oversize", l.dropped_oversize)
      .field("tcp_flows", static_cast<std::uint64_t>(s.tcp_flows()))
      .field("udp_flows", static_cast<std::uint64_t>(s.udp_flows()))
      .field("tcp_admitted", c.tcp_admitted)
      .field("tcp_refused", c.tcp_refused)
      .field("tcp_brokered", c.tcp_brokered)
      .field("udp_admitted", c.udp_admitted)
      .field("udp_refused", c.udp_refused)
      .field("name_refused", c.name_refused)
      .field("connect_failed", c.connect_failed)
      .field("limit_flows", c.limit_flows)
      .field("limit_half_open", c.limit_half_open)
      .field("dns_queries", g.queries)
      .field("dns_denied", g.denied)
      .field("dns_cache_hits", g.cache_hits)
      .field("dns_rebinding", g.rebinding)
      .field("dns_malformed", g.malformed)
      .field("dns_in_flight_full", g.in_flight_full)
      .field("answer_table_size", static_cast<std::uint64_t>(s.table().size()))
      .end_object();
  out += '\n';
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
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

}  // namespace

int run_run_command(std::span<const std::string_view> args) {
  std::optional<std::string> policy_path;
  std::optional<std::string> netns;
  std::optional<int> tap_fd;
  std::string events_path;
  std::string instance = "guest";
  std::string broker_path;
  GuestNetConfig net;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
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
    } else if (a == "--broker") {
      if (v.empty() || v.size() > 107) return bad("a unix socket path of 1 to 107 bytes");
      broker_path = std::string(v);
    } else if (a == "--ifname") {
      if (v.empty() || v.size() > 15) return bad("an interface name of 1 to 15 bytes");
      net.ifname = std::string(v);
    } else {
      std::cerr << "abox-net run: unknown option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (!policy_path || (netns.has_value() == tap_fd.has_value())) {
    std::cerr << "abox-net run: --policy and exactly one of --netns or --tap-fd are required\n" << kUsage;
    return 2;
  }
  auto loaded = load_policy_for("abox-net run", *policy_path);
  if (!loaded) return 3;
  const policy::Policy& policy = *loaded->policy;
  const auto& upstreams = loaded->upstreams;

  auto link =
      netns ? TapLink::create_in_netns(*netns, net) : TapLink::from_fd(base::UniqueFd(*tap_fd), net.mtu);
  if (!link.ok()) {
    std::cerr << "abox-net run: " << link.error() << '\n';
    return 3;
  }
  TapLink& tap = **link;

  auto sink = open_events("abox-net run", events_path);
  if (!sink) return 3;
  base::EventLog events = base::EventLog::to_fd(instance, sink->fd);
  base::SystemRandom random;

  try {
    EventLoop loop;
    GuestConfig gc;
    gc.gateway = net.gateway;
    gc.guest = net.guest_address;
    gc.prefix_len = net.prefix_len;
    gc.gateway_mac = net.gateway_mac;
    gc.broker_path = broker_path;
    gc.instance = instance;
    GuestStack stack(loop, tap, policy, upstreams, events, random, gc);
    SignalWatch signals(loop, [&stack, &tap] { write_counters(stack, tap); });
    // pasta's way: notice the namespace going away about once a second.
    base::MonoTime next_check = loop.now() + base::Seconds(1);
    loop.add_timer_source({[&] { return next_check; },
                           [&](base::MonoTime now) {
                             if (now < next_check) return;
                             next_check = now + base::Seconds(1);
                             if (!tap.netns_alive()) {
                               events.emit("link", {{"reason", "the guest namespace went away"}});
                               loop.stop();
                             }
                           }});
    events.emit("start", {{"mode", "run"},
                          {"policy", policy.source()},
                          {"guest", net.guest_address.to_string()},
                          {"gateway", net.gateway.to_string()},
                          {"mtu", static_cast<std::uint64_t>(net.mtu)}});
    std::cout << "ready guest=" << net.guest_address.to_string() << '/' << net.prefix_len
              << " gateway=" << net.gateway.to_string() << " mtu=" << net.mtu << std::endl;
    loop.run();
    write_counters(stack, tap);
  } catch (const std::exception& e) {
    std::cerr << "abox-net run: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
