#include "dns/gate.h"

#include <algorithm>
#include <cstring>

#include "dns/answer_filter.h"

namespace abox::dns {

namespace {

// Upper bound on answer bytes the cache keeps per instance; entries are
// further bounded by the AnswerTable's size.
constexpr std::size_t kCacheBytes = 4u << 20;

std::string coalescing_key(const Query& q) {
  std::string k;
  k.reserve(q.qname_wire_len + 5);
  for (std::uint8_t b : q.qname()) {
    k.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b - 'A' + 'a' : b));
  }
  k.push_back(static_cast<char>(q.qtype >> 8));
  k.push_back(static_cast<char>(q.qtype & 0xFF));
  k.push_back(static_cast<char>(q.qclass >> 8));
  k.push_back(static_cast<char>(q.qclass & 0xFF));
  k.push_back(q.dnssec_ok ? '1' : '0');
  return k;
}

// The answer's ID and question name become the guest's own (the gate asked
// upstream in lower case; a resolver using 0x20 wants its spelling back).
void personalize(std::vector<std::uint8_t>& wire, const Query& q) {
  if (wire.size() < kHeaderSize + q.qname_wire_len) return;
  wire[0] = static_cast<std::uint8_t>(q.id >> 8);
  wire[1] = static_cast<std::uint8_t>(q.id & 0xFF);
  std::memcpy(wire.data() + kHeaderSize, q.qname_wire.data(), q.qname_wire_len);
}

std::string_view rcode_name(std::uint8_t rc) {
  switch (rc) {
    case rcode::NOERROR:
      return "NOERROR";
    case rcode::FORMERR:
      return "FORMERR";
    case rcode::SERVFAIL:
      return "SERVFAIL";
    case rcode::NXDOMAIN:
      return "NXDOMAIN";
    case rcode::NOTIMP:
      return "NOTIMP";
    case rcode::REFUSED:
      return "REFUSED";
    default:
      return "OTHER";
  }
}

}  // namespace

std::string type_name(std::uint16_t qtype) {
  switch (qtype) {
    case rr_type::A:
      return "A";
    case rr_type::NS:
      return "NS";
    case rr_type::CNAME:
      return "CNAME";
    case rr_type::SOA:
      return "SOA";
    case rr_type::PTR:
      return "PTR";
    case rr_type::MX:
      return "MX";
    case rr_type::TXT:
      return "TXT";
    case rr_type::AAAA:
      return "AAAA";
    case rr_type::SRV:
      return "SRV";
    case rr_type::DNAME:
      return "DNAME";
    case rr_type::SVCB:
      return "SVCB";
    case rr_type::HTTPS:
      return "HTTPS";
    case rr_type::IXFR:
      return "IXFR";
    case rr_type::AXFR:
      return "AXFR";
    case rr_type::ANY:
      return "ANY";
    default:
      return "TYPE" + std::to_string(qtype);
  }
}

DnsGate::DnsGate(const policy::Policy& policy, const policy::HostAddresses& host,
                 std::vector<policy::Endpoint> upstreams, AnswerTable& table, base::EventLog& events,
                 base::RandomSource& random, GateSink& sink)
    : policy_(&policy),
      audit_(policy.mode().audit),
      host_(host),
      upstreams_(std::move(upstreams)),
      table_(table),
      events_(events),
      random_(random),
      sink_(sink),
      cache_(policy.limits().answer_entries, kCacheBytes),
      slot_limit_(policy.limits().dns_in_flight) {
  // Slots, and each slot's waiters, are made on first use (up to
  // slot_limit_ and kMaxWaiters, then kept): making them all up front cost
  // about 28 KiB of an idle abox-net's RSS (and its waiters once 1 MiB).
  out_.reserve(kMaxMessageSize);
}

void DnsGate::reply(const GuestRef& to, const Query& q, std::span<const std::uint8_t> answer) {
  out_.assign(answer.begin(), answer.end());
  personalize(out_, q);
  if (!q.has_edns) drop_opt_record(out_);
  if (to.transport == Transport::udp && out_.size() > q.udp_limit()) {
    truncate_for_udp(q, out_);
    ++counters_.truncated;
  }
  sink_.send_to_guest(to, out_);
}

void DnsGate::reply_empty(const GuestRef& to, const Query& q, std::uint8_t rc) {
  build_empty_answer(q, rc, out_);
  if (rc == rcode::SERVFAIL) ++counters_.servfail;
  sink_.send_to_guest(to, out_);
}

void DnsGate::emit_deny(const Query& q) {
  std::string shown;
  if (q.canonical_ok) {
    shown = q.name.str();
  } else {
    // Presentation form with unusual bytes escaped, so the event shows
    // exactly what the guest asked without passing control bytes on.
    for (std::size_t i = 0; i < q.qname_wire_len;) {
      std::uint8_t len = q.qname_wire[i++];
      if (len == 0) break;
      if (!shown.empty()) shown += '.';
      for (std::uint8_t k = 0; k < len && i < q.qname_wire_len; ++k, ++i) {
        auto c = static_cast<char>(q.qname_wire[i]);
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                     c == '_';
        if (plain) {
          shown += c;
        } else {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\%03u", static_cast<unsigned>(q.qname_wire[i]));
          shown += buf;
        }
      }
    }
    if (shown.empty()) shown.push_back('.');  // not = ".": GCC 12 -O3 false -Wrestrict (bug 105329)
  }
  events_.write_reserved("deny",
                         {{"reason", q.canonical_ok ? "name not allowed" : "name has no canonical form"},
                          {"name", shown},
                          {"type", type_name(q.qtype)}});
}

bool DnsGate::on_guest_query(std::span<const std::uint8_t> msg, const GuestRef& from, base::MonoTime now) {
  ++counters_.queries;
  auto parsed = parse_query(msg);
  if (!parsed.ok()) {
    ++counters_.malformed;
    // A response sent to the gate gets no answer: answering responses is
    // how two servers end up in a loop.
    if (parsed.error() == QueryError::not_a_query) return false;
    events_.emit("dns", {{"verdict", "malformed"},
                         {"reason", describe(parsed.error())},
                         {"transport", from.transport == Transport::udp ? "udp" : "tcp"},
                         {"bytes", static_cast<std::uint64_t>(msg.size())}});
    if (!build_formerr(msg, out_)) return false;
    sink_.send_to_guest(from, out_);
    return true;
  }
  const Query& q = *parsed;

  if (q.opcode != 0 || q.qtype == rr_type::ANY) {
    ++counters_.refused_type;
    reply_empty(from, q, rcode::NOTIMP);
    return true;
  }
  if (q.qclass != kClassIN || q.qtype == rr_type::AXFR || q.qtype == rr_type::IXFR) {
    ++counters_.refused_type;
    reply_empty(from, q, rcode::REFUSED);
    return true;
  }
  if (q.canonical_ok && audit_ && !policy_->allows_name(q.name.view())) {
    // Audit mode: asked as an allowed name would be, and said.
    ++counters_.would_deny;
    if (events_.reserve_line()) {
      events_.write_reserved("would_deny", {{"reason", "name not allowed"},
                                            {"name", q.name.view()},
                                            {"type", type_name(q.qtype)},
                                            {"audit", true}});
    }
  } else if (!q.canonical_ok || !policy_->allows_name(q.name.view())) {
    ++counters_.denied;
    // A guest decides how many denials there are: the rate cap first, the
    // name's text only for a line that will be written.
    if (events_.reserve_line()) emit_deny(q);
    reply_empty(from, q,
                policy_->dns().denied == policy::DeniedAnswer::nxdomain ? rcode::NXDOMAIN : rcode::REFUSED);
    return true;
  }
  if (q.qtype == rr_type::HTTPS || q.qtype == rr_type::SVCB) {
    ++counters_.nodata_https;
    reply_empty(from, q, rcode::NOERROR);
    return true;
  }

  auto hit = cache_.lookup(q, now, out_);
  // An answer cached before one of its addresses became this host's is
  // asked for again: the filter removes that address now.
  if (hit && std::any_of(hit->addresses.begin(), hit->addresses.end(),
                         [&](const AnsweredAddress& a) { return host_.contains(a.address); })) {
    hit.reset();
  }
  if (hit) {
    ++counters_.cache_hits;
    ++counters_.answered;
    for (const auto& a : hit->addresses) {
      table_.record(a.address, q.name.view(), now + base::Seconds(a.ttl), now);
    }
    if (!q.has_edns) drop_opt_record(out_);
    if (from.transport == Transport::udp && out_.size() > q.udp_limit()) {
      truncate_for_udp(q, out_);
      ++counters_.truncated;
    }
    sink_.send_to_guest(from, out_);
    return true;
  }
  forward(q, from, now);
  return true;
}

void DnsGate::forward(const Query& q, const GuestRef& from, base::MonoTime now) {
  std::string key = coalescing_key(q);
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    Slot& s = slots_[it->second];
    if (s.waiters.size() < kMaxWaiters) {
      s.waiters.push_back(Waiter{from, q});
      ++counters_.coalesced;
      return;
    }
  }
  if (free_slots_.empty() && slots_.size() >= slot_limit_) {
    ++counters_.in_flight_full;
    events_.emit("limit", {{"reason", "dns_in_flight"},
                           {"limit", static_cast<std::uint64_t>(slot_limit_)},
                           {"name", q.name.view()}});
    reply_empty(from, q, rcode::SERVFAIL);
    return;
  }
  // A freed slot first (the most recently freed), else a new one: the same
  // order the slots were handed out in when all were made up front.
  std::uint32_t idx = 0;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else {
    idx = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  ++in_flight_;
  Slot& s = slots_[idx];
  s.busy = true;
  s.attempt = 0;
  s.transport = Transport::udp;
  s.first_upstream = next_upstream_++ % upstreams_.size();
  s.key = key;
  s.waiters.clear();
  s.waiters.push_back(Waiter{from, q});
  by_key_.insert_or_assign(std::move(key), idx);
  send_attempt(idx, now);
}

void DnsGate::send_attempt(std::uint32_t idx, base::MonoTime now) {
  Slot& s = slots_[idx];
  s.upstream_id = random_.next_u16();
  build_upstream_query(s.waiters.front().query, s.upstream_id, s.query_wire);
  s.deadline = now + base::Millis(policy_->dns().timeout_ms);
  const auto& up = upstreams_[(s.first_upstream + s.attempt) % upstreams_.size()];
  ++counters_.forwarded;
  sink_.send_upstream(idx, up, s.transport, s.query_wire);
}

void DnsGate::next_attempt_or_fail(std::uint32_t idx, base::MonoTime now) {
  Slot& s = slots_[idx];
  std::size_t total = static_cast<std::size_t>(policy_->dns().attempts) * upstreams_.size();
  if (s.attempt + 1 >= total) {
    finish(idx, nullptr, now);
    return;
  }
  ++s.attempt;
  s.transport = Transport::udp;
  send_attempt(idx, now);
}

void DnsGate::on_upstream_reply(std::uint32_t idx, std::span<const std::uint8_t> msg, base::MonoTime now) {
  if (idx >= slots_.size() || !slots_[idx].busy) {
    ++counters_.upstream_ignored;
    return;
  }
  Slot& s = slots_[idx];
  const Query& asked = s.waiters.front().query;
  // The question as sent upstream: lower case, from the query we built.
  AskedQuestion aq{s.upstream_id,
                   std::span<const std::uint8_t>(s.query_wire).subspan(kHeaderSize, asked.qname_wire_len),
                   asked.qtype, asked.qclass};
  auto filtered = filter_upstream_answer(msg, aq, *policy_, host_);
  if (!filtered.ok()) {
    ++counters_.upstream_ignored;
    return;  // not ours, or garbage: keep waiting for the real answer or the deadline
  }
  if (filtered->truncated && s.transport == Transport::udp) {
    ++counters_.tcp_retries;
    s.transport = Transport::tcp;
    send_attempt(idx, now);
    return;
  }
  std::uint8_t rc = filtered->rcode;
  if (rc != rcode::NOERROR && rc != rcode::NXDOMAIN) {
    ++counters_.upstream_errors;
    events_.emit("dns",
                 {{"verdict", "upstream error"},
                  {"reason", rcode_name(rc)},
                  {"name", asked.name.view()},
                  {"upstream", upstreams_[(s.first_upstream + s.attempt) % upstreams_.size()].to_string()}});
    next_attempt_or_fail(idx, now);
    return;
  }
  finish(idx, &*filtered, now);
}

void DnsGate::on_upstream_error(std::uint32_t idx, base::MonoTime now) {
  if (idx >= slots_.size() || !slots_[idx].busy) return;
  ++counters_.upstream_errors;
  next_attempt_or_fail(idx, now);
}

void DnsGate::on_tick(base::MonoTime now) {
  if (in_flight_ == 0) return;
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.busy || s.deadline > now) continue;
    ++counters_.upstream_timeouts;
    next_attempt_or_fail(i, now);
  }
}

std::optional<base::MonoTime> DnsGate::next_deadline() const {
  std::optional<base::MonoTime> best;
  if (in_flight_ == 0) return best;
  for (const auto& s : slots_) {
    if (s.busy && (!best || s.deadline < *best)) best = s.deadline;
  }
  return best;
}

void DnsGate::record_answer(const Query& q, const FilteredAnswer& a, base::MonoTime now) {
  // The rate cap first: an upstream can put many addresses in one answer,
  // and past the cap their text would be built only to be thrown away.
  for (const auto& r : a.rebinding) {
    ++counters_.rebinding;
    if (!events_.reserve_line()) continue;
    events_.write_reserved("rebinding",
                           {{"reason", "reserved address removed from answer"},
                            {"name", q.name.view()},
                            {"owner", r.owner},
                            {"address", r.address.to_string()},
                            {"range", r.range == &policy::HostAddresses::range() ? r.address.to_string()
                                      : r.range                                  ? r.range->range.to_string()
                                                                                 : std::string("?")},
                            {"range_name", r.range ? r.range->name : std::string_view("?")}});
  }
  for (const auto& addr : a.addresses) {
    if (addr.lifted) {
      ++counters_.unsafe_lifted;
      if (events_.reserve_line()) {
        events_.write_reserved(
            "unsafe", {{"reason", "reserved address answered because [unsafe] allow_reserved lifts it"},
                       {"name", q.name.view()},
                       {"address", addr.address.to_string()}});
      }
    }
    table_.record(addr.address, q.name.view(), now + base::Seconds(addr.ttl), now);
  }
}

void DnsGate::finish(std::uint32_t idx, const FilteredAnswer* answer, base::MonoTime now) {
  Slot& s = slots_[idx];
  if (answer == nullptr) {
    events_.emit("dns", {{"verdict", "servfail"},
                         {"reason", "no upstream answered"},
                         {"name", s.waiters.front().query.name.view()},
                         {"type", type_name(s.waiters.front().query.qtype)}});
    for (const auto& w : s.waiters) reply_empty(w.to, w.query, rcode::SERVFAIL);
  } else if (!audit_ && !policy_->allows_name(s.waiters.front().query.name.view())) {
    // Asked under a policy that allowed the name, answered after a reload
    // that revoked it (set_policy()): denied, never recorded or cached.
    const std::uint8_t rc =
        policy_->dns().denied == policy::DeniedAnswer::nxdomain ? rcode::NXDOMAIN : rcode::REFUSED;
    for (const auto& w : s.waiters) {
      ++counters_.denied;
      reply_empty(w.to, w.query, rc);
    }
  } else {
    const Query& first = s.waiters.front().query;
    record_answer(first, *answer, now);
    cache_.insert(first, *answer, now);
    for (const auto& w : s.waiters) {
      ++counters_.answered;
      reply(w.to, w.query, answer->wire);
    }
  }
  release(idx);
}

void DnsGate::release(std::uint32_t idx) {
  Slot& s = slots_[idx];
  sink_.cancel_upstream(idx);
  if (auto it = by_key_.find(s.key); it != by_key_.end() && it->second == idx) by_key_.erase(it);
  s.busy = false;
  s.waiters.clear();
  s.key.clear();
  free_slots_.push_back(idx);
  --in_flight_;
}

}  // namespace abox::dns
