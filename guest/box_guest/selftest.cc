// Selftest (see selftest.h for what each probe proves).
#include "guest/box_guest/selftest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "guest/box_guest/dhcp_packet.h"
#include "guest/box_guest/dns_probe_message.h"

namespace abox::guest {
namespace {

constexpr std::size_t kMaxDetail = 256;   // the report's cap
constexpr int kMaxDatagramsPerWake = 16;  // a flood cannot hold the loop
constexpr std::string_view kForeignQueryName = "example.com";

std::string errno_text(int e) {
  return std::strerror(e);
}

std::string after(std::int64_t started, std::int64_t now) {
  return " after " + std::to_string(now - started) + " ms";
}

std::string ignored_note(int ignored) {
  return ignored == 0 ? ""
                      : "; ignored " + std::to_string(ignored) + " datagram(s) that did not answer the query";
}

}  // namespace

Selftest::Selftest(const std::vector<Probe>& probes, SelftestContext context, base::RandomSource& random,
                   std::int64_t now_ms)
    : context_(std::move(context)) {
  runs_.reserve(probes.size());
  for (const auto& p : probes) {
    Run& run = runs_.emplace_back();
    run.probe = p;
    run.result.kind = p.kind;
    run.result.target = p.target;
    run.started = now_ms;
    run.deadline = now_ms + context_.timeout_ms;
    start(run, random);
  }
}

void Selftest::finish(Run& run, ProbeOutcome outcome, std::string detail) {
  if (run.finished) return;
  run.finished = true;
  run.fd.reset();
  run.result.outcome = outcome;
  if (detail.size() > kMaxDetail) detail.resize(kMaxDetail);
  run.result.detail = std::move(detail);
}

void Selftest::start(Run& run, base::RandomSource& random) {
  const std::string& target = run.probe.target;
  if (run.probe.kind == ProbeKind::kNonceInEnv) {
    const EnvEntry* found = nullptr;
    for (const auto& e : context_.env)
      if (e.name == target) found = &e;  // the last one wins, as execve's environment reads
    if (found == nullptr) return finish(run, ProbeOutcome::kFailed, "not set in the command's environment");
    if (!is_abox_nonce(found->value))
      return finish(run, ProbeOutcome::kFailed,
                    "set, but not to an abox nonce (" + std::to_string(found->value.size()) + " bytes)");
    return finish(run, ProbeOutcome::kPassed, "holds an abox nonce");
  }
  if (!context_.network_up) return finish(run, ProbeOutcome::kSkipped, "the network is not up");

  if (run.probe.kind == ProbeKind::kDeniedName) {
    if (!context_.dns_server) return finish(run, ProbeOutcome::kSkipped, "the lease named no DNS server");
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(context_.dns_port);
    sin.sin_addr.s_addr = htonl(*context_.dns_server);
    SocketAddress to;
    std::memcpy(&to.storage, &sin, sizeof sin);
    to.length = sizeof sin;
    to.family = AF_INET;
    return start_query(run, to, target, random);
  }

  auto to = parse_address_port(target);
  if (!to) return finish(run, ProbeOutcome::kSkipped, "the target is not ADDR:PORT");
  if (run.probe.kind == ProbeKind::kForeignResolver) return start_query(run, *to, kForeignQueryName, random);

  // kDirectAddress
  run.fd.reset(::socket(to->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!run.fd) return finish(run, ProbeOutcome::kSkipped, "socket: " + errno_text(errno));
  if (::connect(run.fd.get(), reinterpret_cast<const sockaddr*>(&to->storage), to->length) == 0)
    return finish(run, ProbeOutcome::kFailed, "connected at once: nothing refused it");
  if (errno != EINPROGRESS) return finish(run, ProbeOutcome::kPassed, "connect: " + errno_text(errno));
  run.events = POLLOUT;
}

void Selftest::start_query(Run& run, const SocketAddress& to, std::string_view name,
                           base::RandomSource& random) {
  run.query_id = random.next_u16();
  run.query_name = std::string(name);
  std::vector<std::uint8_t> query;
  if (!build_a_query(name, run.query_id, query))
    return finish(run, ProbeOutcome::kSkipped, "the target is not a host name");
  run.fd.reset(::socket(to.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!run.fd) return finish(run, ProbeOutcome::kSkipped, "socket: " + errno_text(errno));
  // Connected: only the target's datagrams arrive, and its ICMP errors are reported.
  if (::connect(run.fd.get(), reinterpret_cast<const sockaddr*>(&to.storage), to.length) != 0)
    return finish(run, ProbeOutcome::kSkipped, "connect: " + errno_text(errno));
  if (::send(run.fd.get(), query.data(), query.size(), 0) != static_cast<ssize_t>(query.size()))
    return finish(run, ProbeOutcome::kSkipped, "could not send the query: " + errno_text(errno));
  run.events = POLLIN;
}

void Selftest::add_poll_fds(std::vector<pollfd>& out) const {
  for (const auto& run : runs_)
    if (!run.finished && run.fd) out.push_back(pollfd{run.fd.get(), run.events, 0});
}

void Selftest::on_poll(std::span<const pollfd> polled, std::int64_t now_ms) {
  for (const auto& p : polled) {
    if (p.revents == 0) continue;
    for (auto& run : runs_) {
      if (run.finished || !run.fd || run.fd.get() != p.fd) continue;
      switch (run.probe.kind) {
        case ProbeKind::kDeniedName:
          readable_denied_name(run, now_ms);
          break;
        case ProbeKind::kDirectAddress:
          writable_direct_address(run);
          break;
        case ProbeKind::kForeignResolver:
          readable_foreign_resolver(run, now_ms);
          break;
        case ProbeKind::kNonceInEnv:
          break;
      }
    }
  }
  on_time(now_ms);
}

void Selftest::readable_denied_name(Run& run, std::int64_t now_ms) {
  std::uint8_t buf[4096];
  for (int i = 0; i < kMaxDatagramsPerWake && !run.finished; ++i) {
    ssize_t n = ::recv(run.fd.get(), buf, sizeof buf, MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      // ICMP: the resolver's port or host is unreachable, so no address can come from it.
      return finish(run, ProbeOutcome::kPassed,
                    "no A record: the resolver is unreachable (" + errno_text(errno) + ")" +
                        after(run.started, now_ms));
    }
    const auto size = std::min(static_cast<std::size_t>(n), sizeof buf);
    auto answer = parse_a_answer(std::span<const std::uint8_t>(buf, size), run.query_id, run.query_name);
    if (!answer.ok()) {
      ++run.ignored;
      if (!dns_answer_is_someone_elses(answer.error()))
        run.note = "; a malformed answer (" + std::string(dns_answer_error_name(answer.error())) + ")";
      continue;
    }
    const auto& a = *answer;
    const std::string rcode(dns_rcode_name(a.rcode));
    if (a.a_count > 0)
      return finish(
          run, ProbeOutcome::kFailed,
          "answered with A " + ipv4_text(a.a[0]) + (a.a_count > 1 ? " and more" : "") + " (" + rcode + ")");
    if (a.truncated)
      return finish(run, ProbeOutcome::kFailed,
                    "a truncated answer (TC) without an A record: cannot tell (" + rcode + ")");
    return finish(run, ProbeOutcome::kPassed, rcode + ", no A record" + ignored_note(run.ignored) + run.note);
  }
}

void Selftest::writable_direct_address(Run& run) {
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(run.fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
  if (error == 0) return finish(run, ProbeOutcome::kFailed, "connected: nothing refused it");
  finish(run, ProbeOutcome::kPassed, "connect: " + errno_text(error));
}

void Selftest::readable_foreign_resolver(Run& run, std::int64_t now_ms) {
  std::uint8_t buf[4096];
  for (int i = 0; i < kMaxDatagramsPerWake && !run.finished; ++i) {
    ssize_t n = ::recv(run.fd.get(), buf, sizeof buf, MSG_TRUNC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      // An ICMP error on the connected socket: the path or the port refused
      // the query, so no answer comes from there. Final, like denied_name's:
      // waiting out the deadline would add 2 s to every boot behind abox-net,
      // which answers such a datagram with an unreachable at once.
      return finish(run, ProbeOutcome::kPassed,
                    "no reply: " + errno_text(errno) + " (ICMP)" + after(run.started, now_ms));
    }
    std::string what = "a reply of " + std::to_string(n) + " bytes";
    const auto size = std::min(static_cast<std::size_t>(n), sizeof buf);
    auto answer = parse_a_answer(std::span<const std::uint8_t>(buf, size), run.query_id, run.query_name);
    if (answer.ok()) {
      what +=
          " (" + std::string(dns_rcode_name(answer->rcode)) + ", " + std::to_string(answer->a_count) + " A)";
    } else {
      what += " (not a DNS answer to the query: " + std::string(dns_answer_error_name(answer.error())) + ")";
    }
    return finish(run, ProbeOutcome::kFailed, what + after(run.started, now_ms));
  }
}

void Selftest::timed_out(Run& run) {
  const std::string within = " within " + std::to_string(context_.timeout_ms) + " ms";
  switch (run.probe.kind) {
    case ProbeKind::kDeniedName:
      return finish(run, ProbeOutcome::kPassed, "no answer" + within + ignored_note(run.ignored) + run.note);
    case ProbeKind::kDirectAddress:
      return finish(run, ProbeOutcome::kPassed, "no answer" + within);
    case ProbeKind::kForeignResolver:
      return finish(run, ProbeOutcome::kPassed, "no reply" + within + run.note);
    case ProbeKind::kNonceInEnv:
      break;
  }
}

void Selftest::on_time(std::int64_t now_ms) {
  for (auto& run : runs_)
    if (!run.finished && now_ms >= run.deadline) timed_out(run);
}

std::optional<std::int64_t> Selftest::next_deadline() const {
  std::optional<std::int64_t> next;
  for (const auto& run : runs_)
    if (!run.finished && (!next || run.deadline < *next)) next = run.deadline;
  return next;
}

bool Selftest::done() const {
  for (const auto& run : runs_)
    if (!run.finished) return false;
  return true;
}

SelftestReport Selftest::report() const {
  SelftestReport r;
  for (const auto& run : runs_) r.results.push_back(run.result);
  return r;
}

}  // namespace abox::guest
