// The self-test's probes on loopback, against real sockets: a resolver that
// refuses, answers, stays silent, sends garbage or is not there; a port that
// accepts or refuses; a foreign resolver that answers or is silent; the
// nonce in the env. Each probe's outcome and the words of its detail.
#include "guest/box_guest/selftest.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "base/random.h"
#include "guest/box_guest/console.h"

namespace abox::guest {
namespace {

constexpr std::uint32_t kLoopback = 0x7F00'0001;
using Datagram = std::vector<std::uint8_t>;
using Datagrams = std::vector<Datagram>;

// A UDP "resolver" on 127.0.0.1: answers the first query with what reply()
// builds from it (each returned datagram is sent; none: silence).
class FakeResolver {
 public:
  using Reply = std::function<Datagrams(const Datagram& query)>;
  explicit FakeResolver(Reply reply) : reply_(std::move(reply)) {
    fd_.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(kLoopback);
    ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin);
    socklen_t len = sizeof sin;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sin), &len);
    port_ = ntohs(sin.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeResolver() { thread_.join(); }
  std::uint16_t port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;
    std::vector<std::uint8_t> q(512);
    sockaddr_in from{};
    socklen_t len = sizeof from;
    ssize_t n = ::recvfrom(fd_.get(), q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) return;
    q.resize(static_cast<std::size_t>(n));
    for (const auto& d : reply_(q))
      ::sendto(fd_.get(), d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
  Reply reply_;
  base::UniqueFd fd_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// The query turned into a response: QR set, the rcode, and A records (data
// only; the owner is a pointer to the question).
std::vector<std::uint8_t> respond(const std::vector<std::uint8_t>& q, std::uint8_t rcode,
                                  std::vector<std::array<std::uint8_t, 4>> a = {}, bool tc = false) {
  auto r = q;
  r[2] = static_cast<std::uint8_t>(0x81 | (tc ? 0x02 : 0));
  r[3] = static_cast<std::uint8_t>(0x80 | rcode);
  r[7] = static_cast<std::uint8_t>(a.size());
  for (const auto& addr : a) {
    r.insert(r.end(), {0xC0, 12, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4});
    r.insert(r.end(), addr.begin(), addr.end());
  }
  return r;
}

// A loopback port nothing listens on (bound, noted, closed).
std::uint16_t closed_port(int type) {
  base::UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(kLoopback);
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin);
  socklen_t len = sizeof sin;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  return ntohs(sin.sin_port);
}

struct ProbeRig {
  SelftestContext context;
  base::SeededRandom random{7};
  ProbeRig() {
    context.network_up = true;
    context.dns_server = kLoopback;
    context.timeout_ms = 300;
  }
  // Drives the self-test as box-guest's loop does, for at most 5 s.
  SelftestReport operator()(std::vector<Probe> probes) {
    Selftest t(probes, context, random, monotonic_ms());
    for (auto end = monotonic_ms() + 5000; !t.done() && monotonic_ms() < end;) {
      std::vector<pollfd> fds;
      t.add_poll_fds(fds);
      int timeout = 100;
      if (auto d = t.next_deadline())
        timeout = static_cast<int>(std::max<std::int64_t>(0, *d - monotonic_ms()));
      ::poll(fds.data(), fds.size(), timeout);
      t.on_poll(fds, monotonic_ms());
    }
    EXPECT_TRUE(t.done());
    auto report = t.report();
    EXPECT_EQ(report.results.size(), probes.size());
    return report;
  }
  ProbeResult one(ProbeKind kind, std::string target) {
    return (*this)({{kind, std::move(target)}}).results.at(0);
  }
};

bool has(const std::string& detail, std::string_view word) {
  return detail.find(word) != std::string::npos;
}

TEST(Selftest, DeniedNameRefusedPasses) {
  FakeResolver resolver([](const Datagram& q) { return Datagrams{respond(q, 5)}; });
  ProbeRig run;
  run.context.dns_port = resolver.port();
  auto r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(r.detail, "REFUSED, no A record");
  EXPECT_EQ(r.target, "secret.example.test");
}

TEST(Selftest, DeniedNameAnsweredFails) {
  FakeResolver resolver([](const Datagram& q) { return Datagrams{respond(q, 0, {{{93, 184, 215, 18}}})}; });
  ProbeRig run;
  run.context.dns_port = resolver.port();
  auto r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kFailed);
  EXPECT_EQ(r.detail, "answered with A 93.184.215.18 (NOERROR)");
}

TEST(Selftest, DeniedNameTruncatedWithoutAnswerFails) {
  FakeResolver resolver([](const Datagram& q) { return Datagrams{respond(q, 0, {}, /*tc=*/true)}; });
  ProbeRig run;
  run.context.dns_port = resolver.port();
  auto r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kFailed);
  EXPECT_TRUE(has(r.detail, "truncated")) << r.detail;
}

TEST(Selftest, DeniedNameIgnoresRepliesToOtherQueries) {
  FakeResolver resolver([](const Datagram& q) {
    auto other = respond(q, 0, {{{6, 6, 6, 6}}});
    other[1] ^= 1;  // another ID: a spoofed or stale answer
    return Datagrams{other, Datagram{1, 2, 3}, respond(q, 3)};
  });
  ProbeRig run;
  run.context.dns_port = resolver.port();
  auto r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_TRUE(has(r.detail, "NXDOMAIN")) << r.detail;
  EXPECT_TRUE(has(r.detail, "ignored 2")) << r.detail;
}

TEST(Selftest, DeniedNameSilenceOrNoResolverPasses) {
  FakeResolver silent([](const Datagram&) { return Datagrams{}; });
  ProbeRig run;
  run.context.dns_port = silent.port();
  auto r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(r.detail, "no answer within 300 ms");

  run.context.dns_port = closed_port(SOCK_DGRAM);
  r = run.one(ProbeKind::kDeniedName, "secret.example.test");
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_TRUE(has(r.detail, "Connection refused")) << r.detail;
}

TEST(Selftest, DirectAddressConnectingFailsRefusedPasses) {
  base::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(kLoopback);
  ::bind(listener.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin);
  ::listen(listener.get(), 4);
  socklen_t len = sizeof sin;
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  ProbeRig run;
  auto r = run.one(ProbeKind::kDirectAddress, "127.0.0.1:" + std::to_string(ntohs(sin.sin_port)));
  EXPECT_EQ(r.outcome, ProbeOutcome::kFailed);
  EXPECT_TRUE(has(r.detail, "connected")) << r.detail;

  r = run.one(ProbeKind::kDirectAddress, "127.0.0.1:" + std::to_string(closed_port(SOCK_STREAM)));
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(r.detail, "connect: Connection refused");
}

TEST(Selftest, ForeignResolverAnyReplyFails) {
  FakeResolver resolver([](const Datagram& q) { return Datagrams{respond(q, 5)}; });
  ProbeRig run;
  auto r = run.one(ProbeKind::kForeignResolver, resolver.target());
  EXPECT_EQ(r.outcome, ProbeOutcome::kFailed);
  EXPECT_TRUE(has(r.detail, "a reply of")) << r.detail;
  EXPECT_TRUE(has(r.detail, "REFUSED")) << r.detail;

  FakeResolver garbage([](const Datagram&) { return Datagrams{Datagram{'h', 'i'}}; });
  r = run.one(ProbeKind::kForeignResolver, garbage.target());
  EXPECT_EQ(r.outcome, ProbeOutcome::kFailed);
  EXPECT_TRUE(has(r.detail, "not a DNS answer")) << r.detail;
}

TEST(Selftest, ForeignResolverSilenceOrIcmpPasses) {
  FakeResolver silent([](const Datagram&) { return Datagrams{}; });
  ProbeRig run;
  auto r = run.one(ProbeKind::kForeignResolver, silent.target());
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(r.detail, "no reply within 300 ms");

  r = run.one(ProbeKind::kForeignResolver, "127.0.0.1:" + std::to_string(closed_port(SOCK_DGRAM)));
  EXPECT_EQ(r.outcome, ProbeOutcome::kPassed);
  EXPECT_TRUE(has(r.detail, "no reply: Connection refused (ICMP)")) << r.detail;
}

TEST(Selftest, NonceInEnvNeverEchoesTheValue) {
  ProbeRig run;
  const std::string nonce = "abox-nonce-" + std::string(64, 'c');
  run.context.env = {{"OPENAI_API_KEY", "sk-secret-value"}, {"ANTHROPIC_API_KEY", nonce}, {"EMPTY", ""}};
  auto report = run({{ProbeKind::kNonceInEnv, "ANTHROPIC_API_KEY"},
                     {ProbeKind::kNonceInEnv, "OPENAI_API_KEY"},
                     {ProbeKind::kNonceInEnv, "MISSING"},
                     {ProbeKind::kNonceInEnv, "EMPTY"}});
  EXPECT_EQ(report.results[0].outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(report.results[1].outcome, ProbeOutcome::kFailed);
  EXPECT_EQ(report.results[1].detail, "set, but not to an abox nonce (15 bytes)");
  EXPECT_EQ(report.results[2].outcome, ProbeOutcome::kFailed);
  EXPECT_EQ(report.results[2].detail, "not set in the command's environment");
  EXPECT_EQ(report.results[3].outcome, ProbeOutcome::kFailed);
  for (const auto& r : report.results)
    EXPECT_FALSE(has(r.detail, "sk-secret") || has(r.detail, nonce)) << r.detail;
}

TEST(Selftest, WithoutNetworkOrTargetTheNetworkProbesAreSkipped) {
  ProbeRig run;
  run.context.network_up = false;
  run.context.env = {{"K", "abox-nonce-" + std::string(64, '0')}};
  auto report = run({{ProbeKind::kDeniedName, "a.test"},
                     {ProbeKind::kDirectAddress, "127.0.0.1:1"},
                     {ProbeKind::kForeignResolver, "127.0.0.1:1"},
                     {ProbeKind::kNonceInEnv, "K"}});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(report.results[i].outcome, ProbeOutcome::kSkipped);
    EXPECT_EQ(report.results[i].detail, "the network is not up");
  }
  EXPECT_EQ(report.results[3].outcome, ProbeOutcome::kPassed);

  ProbeRig up;
  up.context.dns_server.reset();
  report = up({{ProbeKind::kDeniedName, "a.test"},
               {ProbeKind::kDirectAddress, "somewhere:80"},
               {ProbeKind::kForeignResolver, "1.2.3.4"}});
  EXPECT_EQ(report.results[0].detail, "the lease named no DNS server");
  EXPECT_EQ(report.results[1].detail, "the target is not ADDR:PORT");
  EXPECT_EQ(report.results[2].detail, "the target is not ADDR:PORT");
  for (const auto& r : report.results) EXPECT_EQ(r.outcome, ProbeOutcome::kSkipped);

  up.context.dns_server = kLoopback;
  EXPECT_EQ(up.one(ProbeKind::kDeniedName, "not a name").detail, "the target is not a host name");
}

TEST(Selftest, AllProbesStartAtOnce) {
  FakeResolver silent([](const Datagram&) { return Datagrams{}; });
  FakeResolver silent_dns([](const Datagram&) { return Datagrams{}; });
  ProbeRig run;
  run.context.dns_port = silent_dns.port();
  base::SeededRandom random(1);
  Selftest t({{ProbeKind::kDeniedName, "a.test"},
              {ProbeKind::kForeignResolver, silent.target()},
              {ProbeKind::kDirectAddress, "127.0.0.1:" + std::to_string(closed_port(SOCK_STREAM))}},
             run.context, random, monotonic_ms());
  std::vector<pollfd> fds;
  t.add_poll_fds(fds);
  // Every network probe has its socket out before any is waited on: the
  // self-test takes one timeout, not one per probe (the refused connect may
  // already be done).
  EXPECT_GE(fds.size(), 2u);
  ASSERT_TRUE(t.next_deadline());
  t.on_time(*t.next_deadline());
  EXPECT_TRUE(t.done()) << "one deadline ends them all";
}

}  // namespace
}  // namespace abox::guest
