#include "netstack/dns_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "base/json.h"
#include "dns/resolv_conf.h"
#include "netstack/dns_host_server.h"
#include "policy/policy_file.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net dns --policy FILE [--listen ADDR:PORT] [--events FILE|-] [--instance NAME]\n"
    "\n"
    "Runs only the DNS gate, on a host socket (UDP and TCP on the same port):\n"
    "allowed names are forwarded to the policy's upstreams and filtered,\n"
    "everything else is refused. For benchmarks, and to try a policy.\n"
    "\n"
    "Options:\n"
    "  --policy FILE       the instance's policy (required)\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:5353; port 0 picks one)\n"
    "  --events FILE|-     JSON-lines events to FILE, or '-' for stdout (default: stderr)\n"
    "  --instance NAME     the instance name in events (default: dns)\n"
    "\n"
    "Prints 'listening on ADDR:PORT' when ready. SIGUSR1 prints counters as JSON\n"
    "to stderr; SIGINT or SIGTERM prints them and exits 0.\n"
    "\n"
    "Exit status: 0 stopped by a signal, 2 usage error, 3 could not start\n"
    "(invalid policy, address in use, no upstream).\n";

void write_counters(const DnsHostServer& s) {
  const auto& g = s.gate().counters();
  const auto& t = s.table().counters();
  const auto& c = s.counters();
  const auto& cache = s.gate().cache().counters();
  std::string out;
  base::JsonWriter w(out);
  w.begin_object()
      .field("queries", g.queries)
      .field("answered", g.answered)
      .field("cache_hits", g.cache_hits)
      .field("denied", g.denied)
      .field("malformed", g.malformed)
      .field("refused_type", g.refused_type)
      .field("nodata_https", g.nodata_https)
      .field("forwarded", g.forwarded)
      .field("coalesced", g.coalesced)
      .field("in_flight_full", g.in_flight_full)
      .field("upstream_timeouts", g.upstream_timeouts)
      .field("upstream_errors", g.upstream_errors)
      .field("upstream_ignored", g.upstream_ignored)
      .field("tcp_retries", g.tcp_retries)
      .field("servfail", g.servfail)
      .field("truncated", g.truncated)
      .field("rebinding", g.rebinding)
      .field("unsafe_lifted", g.unsafe_lifted)
      .field("answer_table_size", static_cast<std::uint64_t>(s.table().size()))
      .field("answer_table_evicted", t.evicted_expired + t.evicted_oldest)
      .field("cache_entries", static_cast<std::uint64_t>(s.gate().cache().size()))
      .field("cache_evicted", cache.evicted)
      .field("udp_received", c.udp_received)
      .field("udp_sent", c.udp_sent)
      .field("udp_send_errors", c.udp_send_errors)
      .field("client_table_full", c.client_table_full)
      .field("tcp_accepted", c.tcp_accepted)
      .field("tcp_refused", c.tcp_refused)
      .end_object();
  out += '\n';
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

struct SignalWatcher final : EventLoop::Watcher {
  int fd = -1;
  EventLoop* loop = nullptr;
  const DnsHostServer* server = nullptr;
  void on_ready(std::uint32_t) override {
    signalfd_siginfo si{};
    while (::read(fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGUSR1) {
        write_counters(*server);
      } else {
        loop->stop();
      }
    }
  }
};

}  // namespace

int run_dns_command(std::span<const std::string_view> args) {
  std::optional<std::string> policy_path;
  std::string listen_text = "127.0.0.1:5353";
  std::string events_path;
  std::string instance = "dns";
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size()) return false;
      out = std::string(args[++i]);
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--policy" && value(v)) {
      policy_path = v;
    } else if (a == "--listen" && value(v)) {
      listen_text = v;
    } else if (a == "--events" && value(v)) {
      events_path = v;
    } else if (a == "--instance" && value(v)) {
      instance = v;
    } else {
      std::cerr << "abox-net dns: unknown or incomplete option '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (!policy_path) {
    std::cerr << "abox-net dns: --policy is required\n" << kUsage;
    return 2;
  }
  // Port 0 (the kernel picks one) is fine for a listener, unlike a destination.
  std::string_view lt = listen_text;
  auto listen = lt.ends_with(":0") ? policy::Endpoint::parse(lt.substr(0, lt.size() - 2), 0)
                                   : policy::Endpoint::parse(lt, 53);
  if (!listen) {
    std::cerr << "abox-net dns: cannot read --listen '" << listen_text << "': expected ADDR:PORT\n";
    return 2;
  }
  auto loaded = policy::load_policy(*policy_path);
  if (!loaded.ok()) {
    std::cerr << loaded.error().to_string() << "abox-net dns: the policy is invalid\n";
    return 3;
  }
  const policy::Policy& policy = *loaded;
  for (const auto& w : policy::policy_warnings(policy)) std::cerr << w.to_string() << '\n';
  std::vector<policy::Endpoint> upstreams =
      policy.dns().use_system ? dns::read_resolv_conf() : policy.dns().upstreams;
  if (upstreams.empty()) {
    std::cerr << "abox-net dns: no upstream resolver: /etc/resolv.conf has no usable nameserver; set [dns] "
                 "upstreams in the policy\n";
    return 3;
  }

  int events_fd = STDERR_FILENO;
  base::UniqueFd events_file;
  if (events_path == "-") {
    events_fd = STDOUT_FILENO;
  } else if (!events_path.empty()) {
    events_file.reset(::open(events_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!events_file) {
      std::cerr << "abox-net dns: cannot open --events " << events_path << ": " << std::strerror(errno)
                << '\n';
      return 3;
    }
    events_fd = events_file.get();
  }
  ::signal(SIGPIPE, SIG_IGN);
  base::EventLog events = base::EventLog::to_fd(instance, events_fd);
  base::SystemRandom random;

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  base::UniqueFd sigfd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));

  try {
    EventLoop loop;
    DnsHostServer server(loop, policy, upstreams, *listen, events, random);
    SignalWatcher sig;
    sig.fd = sigfd.get();
    sig.loop = &loop;
    sig.server = &server;
    EventLoop::Handle sh = loop.watch(sigfd.get(), POLLIN, &sig);
    events.emit("start", {{"mode", "dns"},
                          {"listen", server.address().to_string()},
                          {"policy", policy.source()},
                          {"upstreams", static_cast<std::uint64_t>(upstreams.size())}});
    std::cout << "listening on " << server.address().to_string() << std::endl;
    loop.run();
    loop.unwatch(sh);
    write_counters(server);
  } catch (const std::exception& e) {
    std::cerr << "abox-net dns: " << e.what() << '\n';
    return 3;
  }
  return 0;
}

}  // namespace abox::netstack
