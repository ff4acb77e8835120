#include "broker/resolver.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "base/unique_fd.h"
#include "broker/upstream.h"
#include "dns/answer_filter.h"
#include "dns/wire.h"

namespace abox::broker {

struct UpstreamResolver::Query {
  std::string name;
  std::vector<std::uint8_t> qname_wire;
  std::uint16_t qtype = dns::rr_type::A;
  std::uint16_t id = 0;
  std::size_t attempt = 0;  // upstream index + rounds * upstreams
  base::UniqueFd socket;
  BrokerLoop::TimerId timer = 0;
};

namespace {

std::vector<std::uint8_t> name_to_wire(const std::string& name) {
  std::vector<std::uint8_t> out;
  std::size_t start = 0;
  while (start < name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<std::uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + static_cast<std::ptrdiff_t>(start),
               name.begin() + static_cast<std::ptrdiff_t>(dot));
    start = dot + 1;
  }
  out.push_back(0);
  return out;
}

std::vector<std::uint8_t> build_query(std::uint16_t id, const std::vector<std::uint8_t>& qname,
                                      std::uint16_t qtype) {
  std::vector<std::uint8_t> q = {
      static_cast<std::uint8_t>(id >> 8), static_cast<std::uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  q.insert(q.end(), qname.begin(), qname.end());
  q.push_back(static_cast<std::uint8_t>(qtype >> 8));
  q.push_back(static_cast<std::uint8_t>(qtype));
  q.push_back(0);
  q.push_back(static_cast<std::uint8_t>(dns::kClassIN));
  return q;
}

// Every address of the broker's network namespace (getifaddrs(3): a
// netlink dump, answered at once). False when it cannot be read or there
// are more than HostAddresses holds.
bool read_host_addresses(policy::HostAddresses& out) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool ok = true;
  for (const ifaddrs* i = list; i != nullptr && ok; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      ok = out.add(policy::IpAddress::v4_bytes(reinterpret_cast<const std::uint8_t*>(&sin->sin_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      std::array<std::uint8_t, 16> b{};
      std::memcpy(b.data(), &sin6->sin6_addr, b.size());
      ok = out.add(policy::IpAddress::v6(b));
    }
  }
  ::freeifaddrs(list);
  return ok;
}

}  // namespace

UpstreamResolver::UpstreamResolver(BrokerLoop& loop, const policy::Policy& policy,
                                   std::vector<policy::Endpoint> upstreams, base::EventLog& events)
    : loop_(loop), policy_(policy), upstreams_(std::move(upstreams)), events_(events) {
  if (upstreams_.empty())
    events_.emit("broker_config", {{"problem", "no DNS upstream: no binding can resolve"}});
}

UpstreamResolver::~UpstreamResolver() {
  for (auto& [name, q] : pending_) {
    if (q->socket) loop_.unwatch(q->socket.get());
    loop_.cancel(q->timer);
  }
}

UpstreamResolver::Ticket UpstreamResolver::resolve(const std::string& name, Callback cb) {
  Ticket ticket = next_ticket_++;
  auto cached = cache_.find(name);
  policy::HostAddresses host;
  // A cached answer is used only while none of its addresses has become
  // this host's; otherwise it is asked for again (and filtered).
  if (cached != cache_.end() && cached->second.expires > loop_.now() && read_host_addresses(host) &&
      std::none_of(cached->second.addresses.begin(), cached->second.addresses.end(),
                   [&](const policy::IpAddress& a) { return host.contains(a); })) {
    ResolveResult r;
    r.addresses = cached->second.addresses;
    waiters_.emplace(ticket, std::make_pair(name, std::move(cb)));
    loop_.defer([this, ticket, r] {
      auto w = waiters_.find(ticket);
      if (w == waiters_.end()) return;
      Callback fn = std::move(w->second.second);
      waiters_.erase(w);
      fn(r);
    });
    return ticket;
  }
  waiters_.emplace(ticket, std::make_pair(name, std::move(cb)));
  if (pending_.count(name) != 0) return ticket;
  if (pending_.size() >= kMaxPending || upstreams_.empty()) {
    ResolveResult r;
    r.error = upstreams_.empty() ? ResolveError::failed : ResolveError::too_many;
    loop_.defer([this, name, r] { finish(name, r, 0); });
    return ticket;
  }
  auto q = std::make_unique<Query>();
  q->name = name;
  q->qname_wire = name_to_wire(name);
  Query& ref = *q;
  pending_.emplace(name, std::move(q));
  start_attempt(ref);
  return ticket;
}

void UpstreamResolver::cancel(Ticket ticket) {
  waiters_.erase(ticket);
}

void UpstreamResolver::start_attempt(Query& q) {
  if (q.socket) {
    loop_.unwatch(q.socket.get());
    q.socket.reset();
  }
  std::size_t rounds = policy_.dns().attempts;
  if (q.attempt >= upstreams_.size() * rounds) {
    ResolveResult r;
    r.error = ResolveError::failed;
    std::string name = q.name;
    loop_.defer([this, name, r] { finish(name, r, 0); });
    return;
  }
  const policy::Endpoint& up = upstreams_[q.attempt % upstreams_.size()];
  ++q.attempt;
  sockaddr_storage ss{};
  socklen_t len = fill_sockaddr(up.address, up.port, ss);
  q.socket.reset(::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  q.id = random_.next_u16();
  auto msg = build_query(q.id, q.qname_wire, q.qtype);
  std::string name = q.name;
  if (!q.socket || ::connect(q.socket.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::send(q.socket.get(), msg.data(), msg.size(), 0) < 0 ||
      !loop_.watch(q.socket.get(), POLLIN, [this, name](std::uint32_t) { on_readable(name); })) {
    q.socket.reset();
  } else {
    ++queries_sent_;
  }
  loop_.cancel(q.timer);
  q.timer = loop_.schedule(loop_.now() + base::Millis(policy_.dns().timeout_ms),
                           [this, name] { on_timeout(name); });
}

void UpstreamResolver::on_timeout(const std::string& name) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return;
  it->second->timer = 0;
  start_attempt(*it->second);
}

void UpstreamResolver::on_readable(const std::string& name) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return;
  Query& q = *it->second;
  std::array<std::uint8_t, 4096> buf{};
  ssize_t n = ::recv(q.socket.get(), buf.data(), buf.size(), 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    loop_.cancel(q.timer);
    start_attempt(q);  // ICMP unreachable and the like: next upstream now
    return;
  }
  // This host's addresses, read now: an answer naming one would take the
  // key to a service of this host (policy/host_addresses.h). Unreadable:
  // fail closed, this attempt is dropped like a garbled answer.
  policy::HostAddresses host;
  if (!read_host_addresses(host)) {
    events_.emit("broker_config", {{"problem", "cannot read this host's addresses"}, {"name", q.name}});
    loop_.cancel(q.timer);
    start_attempt(q);
    return;
  }
  dns::AskedQuestion asked{q.id, q.qname_wire, q.qtype, dns::kClassIN};
  auto filtered =
      dns::filter_upstream_answer(std::span(buf.data(), static_cast<std::size_t>(n)), asked, policy_, host);
  if (!filtered.ok()) {
    // Not our answer (ID or question mismatch) or garbage: keep waiting for
    // the real one until the timer moves on.
    if (filtered.error() == dns::FilterError::id_mismatch ||
        filtered.error() == dns::FilterError::question_mismatch)
      return;
    loop_.cancel(q.timer);
    start_attempt(q);
    return;
  }
  for (const auto& removed : filtered->rebinding) {
    std::string addr = removed.address.to_string();
    events_.emit("broker_upstream_reserved", {{"name", q.name}, {"address", addr}});
  }
  for (const auto& a : filtered->addresses) {
    if (a.lifted) {
      std::string addr = a.address.to_string();
      events_.emit("unsafe_use",
                   {{"name", q.name}, {"address", addr}, {"what", "broker upstream in a reserved range"}});
    }
  }
  ResolveResult r;
  for (const auto& a : filtered->addresses) r.addresses.push_back(a.address);
  if (r.addresses.empty() && !filtered->rebinding.empty()) {
    r.error = ResolveError::all_reserved;
    finish(name, r, 0);
    return;
  }
  if (r.addresses.empty() && q.qtype == dns::rr_type::A) {
    q.qtype = dns::rr_type::AAAA;
    q.attempt = 0;
    loop_.cancel(q.timer);
    start_attempt(q);
    return;
  }
  finish(name, r, filtered->cache_ttl);
}

void UpstreamResolver::finish(const std::string& name, ResolveResult result, std::uint32_t ttl) {
  auto it = pending_.find(name);
  if (it != pending_.end()) {
    if (it->second->socket) loop_.unwatch(it->second->socket.get());
    loop_.cancel(it->second->timer);
    // The socket closes after the turn (the loop may be inside its handler).
    loop_.defer([q = std::shared_ptr<Query>(std::move(it->second))] {});
    pending_.erase(it);
  }
  if (result.ok() && ttl > 0) cache_[name] = CacheEntry{result.addresses, loop_.now() + base::Seconds(ttl)};
  std::vector<std::pair<Ticket, Callback>> ready;
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    if (w->second.first == name) {
      ready.emplace_back(w->first, std::move(w->second.second));
      w = waiters_.erase(w);
    } else {
      ++w;
    }
  }
  for (auto& [ticket, fn] : ready) fn(result);
}

}  // namespace abox::broker
