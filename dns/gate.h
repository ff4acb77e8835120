// DnsGate: the DNS half of an instance's policy, sans-I/O.
//
// How one guest query goes through (on_guest_query):
//   1. parse_query (dns/wire.h); malformed -> FORMERR (or dropped when not
//      even an ID can be read), counted and logged.
//   2. opcode other than QUERY -> NOTIMP; class other than IN, AXFR/IXFR ->
//      REFUSED; ANY -> NOTIMP (RFC 8482 lets a server decline it).
//   3. a name with no canonical form, or one the policy does not allow ->
//      REFUSED (or NXDOMAIN, per policy), no upstream query, a "deny" event.
//   4. HTTPS/SVCB questions for allowed names -> NOERROR with no records:
//      their hints would name addresses and keys the gate never vetted.
//   5. a fresh cached answer -> served at once, and its addresses are
//      recorded again in the AnswerTable for their remaining TTL (unless one
//      of them has since become an address of this host: then it is asked
//      again, step 6).
//   6. otherwise the question is forwarded: identical questions already in
//      flight share one upstream query (coalescing); else a free slot of the
//      in-flight table (at most limits.dns_in_flight, made on first use)
//      takes it, with a fresh
//      random ID, sent through the sink to an upstream chosen round robin.
//      No free slot -> SERVFAIL and a "limit" event.
// Upstream replies (on_upstream_reply) are matched on slot, ID and question
// by filter_upstream_answer (dns/answer_filter.h); anything else is ignored
// and counted (a spoofing attempt cannot end the wait). A TC reply is asked
// again over TCP; SERVFAIL/REFUSED/NOTIMP or a timeout (on_tick) moves to the
// next upstream, for `attempts` rounds, then the guests get SERVFAIL.
// A good answer is recorded (AnswerTable), cached, logged for each rebinding
// removal, and sent to every waiting guest with its own ID and spelling, cut
// to TC when larger than a UDP guest accepts.
//
// The gate owns no fds and reads no clock; the I/O layer implements GateSink
// and drives time. Everything it holds is bounded by the policy's limits.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/event_log.h"
#include "base/random.h"
#include "dns/answer_table.h"
#include "dns/response_cache.h"
#include "dns/wire.h"
#include "policy/policy.h"

namespace abox::dns {

enum class Transport : std::uint8_t { udp, tcp };

// Where a guest query came from; opaque to the gate, handed back with the
// reply so the I/O layer knows where to send it.
struct GuestRef {
  std::uint64_t token = 0;
  Transport transport = Transport::udp;
};

class GateSink {
 public:
  virtual ~GateSink() = default;
  virtual void send_to_guest(const GuestRef& to, std::span<const std::uint8_t> msg) = 0;
  // Sends a query for in-flight slot `slot`. The I/O layer uses a fresh
  // socket (so a fresh source port) per query, and reports the reply with
  // on_upstream_reply(slot, ...). A new send for a slot replaces the old one.
  virtual void send_upstream(std::uint32_t slot, const policy::Endpoint& upstream, Transport transport,
                             std::span<const std::uint8_t> msg) = 0;
  // The slot is done: close whatever socket serves it.
  virtual void cancel_upstream(std::uint32_t slot) = 0;
};

struct GateCounters {
  std::uint64_t queries = 0;
  std::uint64_t malformed = 0;
  std::uint64_t denied = 0;
  std::uint64_t refused_type = 0;  // AXFR, IXFR, ANY, class != IN, opcode != QUERY
  std::uint64_t nodata_https = 0;  // HTTPS/SVCB answered with no records
  std::uint64_t cache_hits = 0;
  std::uint64_t forwarded = 0;       // upstream queries sent (including retries)
  std::uint64_t coalesced = 0;       // guest queries that joined one in flight
  std::uint64_t in_flight_full = 0;  // refused: dns_in_flight reached
  std::uint64_t upstream_timeouts = 0;
  std::uint64_t upstream_errors = 0;   // SERVFAIL/REFUSED/NOTIMP, socket errors
  std::uint64_t upstream_ignored = 0;  // replies that were not ours (ID, question, garbage)
  std::uint64_t tcp_retries = 0;       // TC from upstream, asked over TCP
  std::uint64_t servfail = 0;          // guests answered SERVFAIL
  std::uint64_t answered = 0;          // guests answered from upstream or cache
  std::uint64_t truncated = 0;         // UDP answers cut to TC
  std::uint64_t rebinding = 0;         // reserved addresses removed from answers
  std::uint64_t unsafe_lifted = 0;     // addresses kept only because [unsafe] lifts them
  std::uint64_t would_deny = 0;        // audit mode: names the policy does not allow, asked anyway
};

class DnsGate {
 public:
  // Waiters per in-flight question; more identical questions get their own slot.
  static constexpr std::size_t kMaxWaiters = 8;

  // upstreams: the resolved list (policy endpoints, or the system's from
  // resolv_conf.h); must not be empty. Everything passed must outlive the gate.
  // `host`: this host's own addresses (policy/host_addresses.h), filtered
  // out of every answer; the owner keeps it current.
  DnsGate(const policy::Policy& policy, const policy::HostAddresses& host,
          std::vector<policy::Endpoint> upstreams, AnswerTable& table, base::EventLog& events,
          base::RandomSource& random, GateSink& sink);

  // A reloaded policy, in force from the next question on (the caller keeps
  // it alive while the gate uses it). A question in flight whose name it no
  // longer allows is answered as denied when its upstream answer comes, and
  // nothing of that answer is recorded. What the gate sized at construction
  // (upstreams, dns_in_flight, the cache) stays.
  void set_policy(const policy::Policy& policy) {
    policy_ = &policy;
    audit_ = policy.mode().audit;
  }
  // Audit mode (policy.h, Mode): a name the policy does not allow is asked
  // upstream anyway and its answer recorded, with a `would_deny` event. A
  // name with no canonical form is still refused, and reserved addresses
  // still leave every answer. Starts as the policy's [mode] audit.
  void set_audit(bool on) { audit_ = on; }
  bool audit() const { return audit_; }

  // Returns false when the query was dropped without an answer (not even an
  // ID to answer to): only then will `from` never reach send_to_guest().
  // Every other query is answered exactly once, now or later.
  bool on_guest_query(std::span<const std::uint8_t> msg, const GuestRef& from, base::MonoTime now);
  void on_upstream_reply(std::uint32_t slot, std::span<const std::uint8_t> msg, base::MonoTime now);
  // The slot's socket failed (connection refused, reset, ICMP error).
  void on_upstream_error(std::uint32_t slot, base::MonoTime now);
  // Retries and SERVFAILs for slots past their deadline.
  void on_tick(base::MonoTime now);
  // When on_tick next has work, if anything is in flight.
  std::optional<base::MonoTime> next_deadline() const;

  std::size_t in_flight() const { return in_flight_; }
  std::size_t capacity() const { return slot_limit_; }
  const GateCounters& counters() const { return counters_; }
  const ResponseCache& cache() const { return cache_; }

 private:
  struct Waiter {
    GuestRef to;
    Query query;  // the guest's own: ID, spelling, EDNS, UDP limit
  };
  struct Slot {
    bool busy = false;
    std::uint16_t upstream_id = 0;
    Transport transport = Transport::udp;
    std::uint32_t attempt = 0;  // 0-based, across upstreams and rounds
    std::size_t first_upstream = 0;
    base::MonoTime deadline{};
    std::string key;  // coalescing key
    std::vector<Waiter> waiters;
    std::vector<std::uint8_t> query_wire;  // what was sent upstream
  };

  void reply(const GuestRef& to, const Query& q, std::span<const std::uint8_t> answer);
  void reply_empty(const GuestRef& to, const Query& q, std::uint8_t rcode);
  // The "deny" event for q; its line was reserved (EventLog::reserve_line).
  void emit_deny(const Query& q);
  void forward(const Query& q, const GuestRef& from, base::MonoTime now);
  void send_attempt(std::uint32_t slot, base::MonoTime now);
  void next_attempt_or_fail(std::uint32_t slot, base::MonoTime now);
  void finish(std::uint32_t slot, const FilteredAnswer* answer, base::MonoTime now);
  void release(std::uint32_t slot);
  void record_answer(const Query& q, const FilteredAnswer& a, base::MonoTime now);

  const policy::Policy* policy_;  // never null; replaced by set_policy()
  bool audit_ = false;
  const policy::HostAddresses& host_;
  std::vector<policy::Endpoint> upstreams_;
  AnswerTable& table_;
  base::EventLog& events_;
  base::RandomSource& random_;
  GateSink& sink_;
  ResponseCache cache_;

  // Slots are made on first use, up to slot_limit_, and never shrink; a
  // deque so a new slot never moves the ones a caller may still hold.
  std::deque<Slot> slots_;
  std::size_t slot_limit_;
  std::vector<std::uint32_t> free_slots_;  // made, and not busy
  std::size_t in_flight_ = 0;
  std::size_t next_upstream_ = 0;
  std::unordered_map<std::string, std::uint32_t> by_key_;  // question -> slot

  std::vector<std::uint8_t> out_;  // reused reply buffer
  GateCounters counters_;
};

// A short name for a record type, for events ("A", "AAAA", "TYPE65").
std::string type_name(std::uint16_t qtype);

}  // namespace abox::dns
