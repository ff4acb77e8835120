// DnsGate driven directly: a recording sink stands in for the I/O layer (the
// end-to-end tests in tests/e2e/ run the same gate against a real upstream
// server and real clients). Upstream answers are built with ldns.
#include "dns/gate.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "policy/policy_file.h"
#include "tests/support/alloc_counter.h"
#include "tests/support/ldns.h"

namespace abox::dns {
namespace {

using base::MonoTime;

struct Sent {
  GuestRef to;
  std::vector<std::uint8_t> msg;
};
struct UpstreamSent {
  std::uint32_t slot;
  policy::Endpoint upstream;
  Transport transport;
  std::vector<std::uint8_t> msg;
};

class RecordingSink : public GateSink {
 public:
  void send_to_guest(const GuestRef& to, std::span<const std::uint8_t> msg) override {
    guest.push_back({to, {msg.begin(), msg.end()}});
  }
  void send_upstream(std::uint32_t slot, const policy::Endpoint& up, Transport t,
                     std::span<const std::uint8_t> msg) override {
    upstream.push_back({slot, up, t, {msg.begin(), msg.end()}});
  }
  void cancel_upstream(std::uint32_t slot) override { cancelled.push_back(slot); }

  std::vector<Sent> guest;
  std::vector<UpstreamSent> upstream;
  std::vector<std::uint32_t> cancelled;
};

std::vector<std::uint8_t> make_query(std::uint16_t id, const std::string& name, std::uint16_t qtype,
                                     std::optional<std::uint16_t> edns = std::nullopt) {
  std::vector<std::uint8_t> q = {
      static_cast<std::uint8_t>(id >> 8),      static_cast<std::uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0,
      edns ? std::uint8_t{1} : std::uint8_t{0}};
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<std::uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + static_cast<std::ptrdiff_t>(start),
             name.begin() + static_cast<std::ptrdiff_t>(dot));
    start = dot + 1;
  }
  q.push_back(0);
  q.push_back(static_cast<std::uint8_t>(qtype >> 8));
  q.push_back(static_cast<std::uint8_t>(qtype));
  q.push_back(0);
  q.push_back(1);
  if (edns) {
    std::vector<std::uint8_t> opt = {
        0, 0, 41, static_cast<std::uint8_t>(*edns >> 8), static_cast<std::uint8_t>(*edns), 0, 0, 0, 0, 0, 0};
    q.insert(q.end(), opt.begin(), opt.end());
  }
  return q;
}

// An upstream answer to the query the gate sent, with the given records
// (zone-file lines) in the answer section.
std::vector<std::uint8_t> make_answer(const std::vector<std::uint8_t>& upstream_query,
                                      const std::vector<std::string>& records, std::uint8_t rc = 0,
                                      bool tc = false, bool edns = false) {
  ldns_pkt* q = nullptr;
  EXPECT_EQ(ldns_wire2pkt(&q, upstream_query.data(), upstream_query.size()), LDNS_STATUS_OK);
  ldns_pkt* a = ldns_pkt_new();
  ldns_pkt_set_id(a, ldns_pkt_id(q));
  ldns_pkt_set_qr(a, true);
  ldns_pkt_set_rd(a, true);
  ldns_pkt_set_ra(a, true);
  ldns_pkt_set_tc(a, tc);
  ldns_pkt_set_rcode(a, rc);
  if (edns) ldns_pkt_set_edns_udp_size(a, 1232);
  ldns_pkt_push_rr(a, LDNS_SECTION_QUESTION, ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(q), 0)));
  for (const auto& line : records) {
    ldns_rr* rr = nullptr;
    EXPECT_EQ(ldns_rr_new_frm_str(&rr, line.c_str(), 0, nullptr, nullptr), LDNS_STATUS_OK) << line;
    ldns_pkt_push_rr(a, LDNS_SECTION_ANSWER, rr);
  }
  std::uint8_t* wire = nullptr;
  std::size_t size = 0;
  EXPECT_EQ(ldns_pkt2wire(&wire, a, &size), LDNS_STATUS_OK);
  std::vector<std::uint8_t> out(wire, wire + size);
  std::free(wire);  // NOLINT(cppcoreguidelines-no-malloc): ldns allocates with malloc
  ldns_pkt_free(a);
  ldns_pkt_free(q);
  return out;
}

std::uint8_t rcode_of(const std::vector<std::uint8_t>& m) {
  return m.size() >= 4 ? (m[3] & 0x0F) : 0xFF;
}
std::uint16_t id_of(const std::vector<std::uint8_t>& m) {
  return static_cast<std::uint16_t>(m.size() >= 2 ? (m[0] << 8) | m[1] : 0);
}
std::uint16_t ancount(const std::vector<std::uint8_t>& m) {
  return static_cast<std::uint16_t>(m.size() >= 8 ? (m[6] << 8) | m[7] : 0);
}

class GateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    make("[dns]\nupstreams = [\"192.0.2.1\", \"192.0.2.2\"]\nattempts = 2\ntimeout_ms = 100\n");
  }

  void make(const std::string& dns_section, const std::string& extra = "") {
    gate_.reset();
    table_.reset();
    auto p = policy::parse_policy(
        dns_section + "[[allow]]\nnames = [\"example.com\", \"*.example.com\"]\nports = [443]\n" + extra,
        "gate.toml");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    policy_ = std::make_unique<policy::Policy>(std::move(p).value());
    table_ = std::make_unique<AnswerTable>(*policy_, policy_->limits().answer_entries);
    gate_ = std::make_unique<DnsGate>(*policy_, host_, policy_->dns().upstreams, *table_, events_, random_,
                                      sink_);
  }

  // Did the gate record `a` for a name whose rule allows TCP `port`? (What
  // admission asks of the table.)
  bool answered_for(const policy::IpAddress& a, std::uint16_t port) const {
    for (const auto& n : table_->names_for(a, now_)) {
      if (policy_->admits(n.name, port, policy::Protocol::tcp) != nullptr) return true;
    }
    return false;
  }

  void query(std::uint64_t token, const std::vector<std::uint8_t>& q, Transport t = Transport::udp) {
    EXPECT_TRUE(gate_->on_guest_query(q, GuestRef{token, t}, now_));
  }

  std::vector<std::string> event_lines_;
  base::EventLog events_{"test", [this](std::string_view l) {
                           event_lines_.emplace_back(l);
                           return true;
                         }};
  base::SeededRandom random_{7};
  RecordingSink sink_;
  std::unique_ptr<policy::Policy> policy_;
  policy::HostAddresses host_;
  std::unique_ptr<AnswerTable> table_;
  std::unique_ptr<DnsGate> gate_;
  MonoTime now_ = MonoTime{} + std::chrono::hours(1);
};

TEST_F(GateTest, DeniedNameIsRefusedWithoutUpstream) {
  query(1, make_query(0x1234, "evil.org", rr_type::A));
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::REFUSED);
  EXPECT_EQ(id_of(sink_.guest[0].msg), 0x1234);
  EXPECT_TRUE(sink_.upstream.empty());
  EXPECT_EQ(gate_->counters().denied, 1u);
  ASSERT_EQ(event_lines_.size(), 1u);
  EXPECT_NE(event_lines_[0].find("\"kind\":\"deny\""), std::string::npos);
  EXPECT_NE(event_lines_[0].find("\"name\":\"evil.org\""), std::string::npos);
}

// A flood of denied names: every one is answered and counted, and past the
// event cap the lines are counted as suppressed, not written.
TEST_F(GateTest, DeniedNamesPastTheRateCapAreAnsweredAndCounted) {
  events_.set_max_per_second(2);
  const std::uint64_t suppressed_before = events_.suppressed();
  for (std::uint16_t i = 0; i < 50; ++i)
    query(i, make_query(i, "evil" + std::to_string(i) + ".org", rr_type::A));
  EXPECT_EQ(sink_.guest.size(), 50u);
  EXPECT_EQ(gate_->counters().denied, 50u);
  int deny_lines = 0;
  for (const auto& e : event_lines_) deny_lines += e.find("\"kind\":\"deny\"") != std::string::npos;
  // The wall clock may turn a second during the loop: a few more lines then.
  EXPECT_GE(deny_lines, 2);
  EXPECT_LE(deny_lines, 6);
  EXPECT_EQ(static_cast<std::uint64_t>(deny_lines) + events_.suppressed() - suppressed_before, 50u);
  EXPECT_NE(event_lines_[0].find("\"name\":\"evil0.org\""), std::string::npos) << event_lines_[0];
}

TEST_F(GateTest, DeniedNameCanBeNxdomain) {
  make("[dns]\nupstreams = [\"192.0.2.1\"]\ndenied = \"nxdomain\"\n");
  query(1, make_query(1, "evil.org", rr_type::A));
  EXPECT_EQ(rcode_of(sink_.guest.at(0).msg), rcode::NXDOMAIN);
}

TEST_F(GateTest, ForwardsAnswersRecordsAndCaches) {
  query(1, make_query(0xBEEF, "WWW.Example.COM", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 1u);
  EXPECT_TRUE(sink_.guest.empty());
  const auto& up = sink_.upstream[0];
  EXPECT_EQ(up.transport, Transport::udp);
  EXPECT_NE(id_of(up.msg), 0xBEEF);  // a fresh ID, never the guest's
  auto qp = parse_query(up.msg);
  ASSERT_TRUE(qp.ok());
  EXPECT_EQ(qp->name.view(), "www.example.com");

  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {"www.example.com. 300 IN A 93.184.215.14"}), now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  const auto& ans = sink_.guest[0].msg;
  EXPECT_EQ(id_of(ans), 0xBEEF);
  EXPECT_EQ(rcode_of(ans), rcode::NOERROR);
  EXPECT_EQ(ancount(ans), 1u);
  // The guest's spelling of the name comes back.
  EXPECT_EQ(std::string(ans.begin() + 13, ans.begin() + 16), "WWW");
  auto addr = *policy::IpAddress::parse("93.184.215.14");
  EXPECT_TRUE(answered_for(addr, 443));
  EXPECT_FALSE(answered_for(addr, 80));
  EXPECT_EQ(gate_->in_flight(), 0u);

  // The same question again: from the cache, no upstream query.
  query(2, make_query(0x0101, "www.example.com", rr_type::A));
  EXPECT_EQ(sink_.upstream.size(), 1u);
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(id_of(sink_.guest[1].msg), 0x0101);
  EXPECT_EQ(ancount(sink_.guest[1].msg), 1u);
  EXPECT_EQ(gate_->counters().cache_hits, 1u);
}

TEST_F(GateTest, OptRecordOnlyForGuestsThatSentOne) {
  query(1, make_query(1, "example.com", rr_type::A));  // no EDNS
  auto up = sink_.upstream.at(0);
  gate_->on_upstream_reply(up.slot,
                           make_answer(up.msg, {"example.com. 60 IN A 93.184.215.14"}, 0, false, true), now_);
  auto arcount = [](const std::vector<std::uint8_t>& m) { return (m[10] << 8) | m[11]; };
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(arcount(sink_.guest[0].msg), 0);
  query(2, make_query(2, "example.com", rr_type::A, 1232));  // EDNS, from the cache
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(arcount(sink_.guest[1].msg), 1);
  query(3, make_query(3, "example.com", rr_type::A));  // no EDNS, from the cache
  EXPECT_EQ(arcount(sink_.guest.at(2).msg), 0);
  EXPECT_EQ(ancount(sink_.guest[2].msg), 1u);
}

TEST_F(GateTest, RebindingAddressesAreRemovedAndLogged) {
  query(1, make_query(7, "rebind.example.com", rr_type::A));
  const auto& up = sink_.upstream.at(0);
  gate_->on_upstream_reply(up.slot,
                           make_answer(up.msg, {"rebind.example.com. 60 IN A 10.0.0.1",
                                                "rebind.example.com. 60 IN A 169.254.169.254",
                                                "rebind.example.com. 60 IN A 93.184.215.14"}),
                           now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(ancount(sink_.guest[0].msg), 1u);
  EXPECT_EQ(gate_->counters().rebinding, 2u);
  EXPECT_FALSE(answered_for(*policy::IpAddress::parse("10.0.0.1"), 443));
  int rebinding_events = 0;
  for (const auto& e : event_lines_)
    rebinding_events += e.find("\"kind\":\"rebinding\"") != std::string::npos;
  EXPECT_EQ(rebinding_events, 2);
}

// Issue 21: an AAAA answer goes through the same filter as A. The reserved
// IPv6 addresses are removed and logged as rebinding, the global one reaches
// the guest and the AnswerTable, which admission reads for IPv6 as for IPv4.
TEST_F(GateTest, AaaaAnswersAreFilteredAndRecorded) {
  query(1, make_query(9, "six.example.com", rr_type::AAAA));
  const auto& up = sink_.upstream.at(0);
  gate_->on_upstream_reply(
      up.slot,
      make_answer(up.msg, {"six.example.com. 60 IN AAAA ::1", "six.example.com. 60 IN AAAA fd12:3456::1",
                           "six.example.com. 60 IN AAAA 64:ff9b::a00:1",
                           "six.example.com. 60 IN AAAA 2002:a9fe:a9fe::1",
                           "six.example.com. 60 IN AAAA 2606:2800:21f:cb07:6820:80da:af6b:8b2c"}),
      now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::NOERROR);
  EXPECT_EQ(ancount(sink_.guest[0].msg), 1u);
  EXPECT_EQ(gate_->counters().rebinding, 4u);
  EXPECT_TRUE(answered_for(*policy::IpAddress::parse("2606:2800:21f:cb07:6820:80da:af6b:8b2c"), 443));
  EXPECT_FALSE(answered_for(*policy::IpAddress::parse("2606:2800:21f:cb07:6820:80da:af6b:8b2c"), 80));
  for (const char* removed : {"::1", "fd12:3456::1", "64:ff9b::a00:1", "2002:a9fe:a9fe::1"}) {
    EXPECT_FALSE(answered_for(*policy::IpAddress::parse(removed), 443)) << removed;
    bool logged = false;
    for (const auto& e : event_lines_) {
      logged |= e.find("\"kind\":\"rebinding\"") != std::string::npos &&
                e.find(std::string("\"") + removed + "\"") != std::string::npos;
    }
    EXPECT_TRUE(logged) << "no rebinding event names " << removed;
  }
}

// Issue 15: an address of the host the gate runs on is removed from answers
// as rebinding, named as the host's own; an answer cached before the host
// took that address is not served again but asked for again and filtered.
TEST_F(GateTest, AddressesOfThisHostAreRemovedEvenFromCachedAnswers) {
  const auto host_ip = *policy::IpAddress::parse("93.184.215.77");
  query(1, make_query(7, "web.example.com", rr_type::A));
  auto up = sink_.upstream.at(0);
  const std::vector<std::string> records = {"web.example.com. 300 IN A 93.184.215.77",
                                            "web.example.com. 300 IN A 93.184.215.14"};
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, records), now_);
  ASSERT_EQ(ancount(sink_.guest.at(0).msg), 2u);  // not this host's yet

  ASSERT_TRUE(host_.add(host_ip));
  query(2, make_query(8, "web.example.com", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 2u) << "a cached answer naming this host's address was served";
  EXPECT_EQ(gate_->counters().cache_hits, 0u);
  up = sink_.upstream.at(1);
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, records), now_);
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(ancount(sink_.guest[1].msg), 1u);
  EXPECT_EQ(gate_->counters().rebinding, 1u);
  bool named = false;
  for (const auto& e : event_lines_) {
    named |= e.find("\"kind\":\"rebinding\"") != std::string::npos &&
             e.find("\"range\":\"93.184.215.77\"") != std::string::npos &&
             e.find("\"range_name\":\"this host's own address\"") != std::string::npos;
  }
  EXPECT_TRUE(named) << "no rebinding event naming this host's address";
  // The filtered answer is cached; it is served from there now.
  query(3, make_query(9, "web.example.com", rr_type::A));
  EXPECT_EQ(sink_.upstream.size(), 2u);
  EXPECT_EQ(ancount(sink_.guest.at(2).msg), 1u);
}

// Past the event rate cap the rebinding lines are not written, but every
// removal is still counted: by the gate, and as suppressed lines by the log.
TEST_F(GateTest, RebindingEventsPastTheRateCapAreCountedNotWritten) {
  events_.set_max_per_second(1);
  const std::uint64_t suppressed_before = events_.suppressed();
  query(1, make_query(7, "rebind.example.com", rr_type::A));
  const auto& up = sink_.upstream.at(0);
  std::vector<std::string> records;
  for (int i = 1; i <= 5; ++i) records.push_back("rebind.example.com. 60 IN A 10.0.0." + std::to_string(i));
  records.emplace_back("rebind.example.com. 60 IN A 93.184.215.14");
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, records), now_);
  EXPECT_EQ(gate_->counters().rebinding, 5u);
  int rebinding_events = 0;
  for (const auto& e : event_lines_)
    rebinding_events += e.find("\"kind\":\"rebinding\"") != std::string::npos;
  // The wall clock may turn a second during the test: one more line then.
  EXPECT_GE(rebinding_events, 1);
  EXPECT_LE(rebinding_events, 2);
  EXPECT_EQ(static_cast<std::uint64_t>(rebinding_events) + events_.suppressed() - suppressed_before, 5u);
}

TEST_F(GateTest, SpoofedRepliesAreIgnored) {
  query(1, make_query(7, "example.com", rr_type::A));
  auto up = sink_.upstream.at(0);
  auto good = make_answer(up.msg, {"example.com. 60 IN A 93.184.215.14"});
  auto spoof = good;
  spoof[0] ^= 0xFF;  // wrong ID
  gate_->on_upstream_reply(up.slot, spoof, now_);
  gate_->on_upstream_reply(up.slot, std::vector<std::uint8_t>{1, 2, 3}, now_);
  EXPECT_TRUE(sink_.guest.empty());
  EXPECT_EQ(gate_->counters().upstream_ignored, 2u);
  gate_->on_upstream_reply(up.slot, good, now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::NOERROR);
}

TEST_F(GateTest, TimeoutsMoveAcrossUpstreamsThenServfail) {
  query(1, make_query(9, "slow.example.com", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 1u);
  auto first = sink_.upstream[0].upstream;
  // attempts = 2 rounds over 2 upstreams: 4 sends, then SERVFAIL.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(gate_->next_deadline().has_value());
    now_ = *gate_->next_deadline();
    gate_->on_tick(now_);
  }
  ASSERT_EQ(sink_.upstream.size(), 4u);
  EXPECT_NE(sink_.upstream[1].upstream, first);
  EXPECT_NE(id_of(sink_.upstream[1].msg), id_of(sink_.upstream[0].msg));
  EXPECT_TRUE(sink_.guest.empty());
  now_ = *gate_->next_deadline();
  gate_->on_tick(now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::SERVFAIL);
  EXPECT_EQ(gate_->in_flight(), 0u);
  EXPECT_FALSE(gate_->next_deadline().has_value());
  EXPECT_EQ(gate_->counters().upstream_timeouts, 4u);
}

TEST_F(GateTest, UpstreamServfailTriesTheNextOne) {
  query(1, make_query(9, "example.com", rr_type::A));
  auto up = sink_.upstream.at(0);
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {}, rcode::SERVFAIL), now_);
  ASSERT_EQ(sink_.upstream.size(), 2u);
  EXPECT_TRUE(sink_.guest.empty());
  auto up2 = sink_.upstream[1];
  gate_->on_upstream_reply(up2.slot, make_answer(up2.msg, {"example.com. 60 IN A 93.184.215.14"}), now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::NOERROR);
}

TEST_F(GateTest, IdenticalQuestionsShareOneUpstreamQuery) {
  query(1, make_query(1, "example.com", rr_type::A));
  query(2, make_query(2, "EXAMPLE.com", rr_type::A));
  query(3, make_query(3, "example.com", rr_type::AAAA));
  ASSERT_EQ(sink_.upstream.size(), 2u);
  EXPECT_EQ(gate_->counters().coalesced, 1u);
  auto up = sink_.upstream[0];
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {"example.com. 60 IN A 93.184.215.14"}), now_);
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(id_of(sink_.guest[0].msg), 1);
  EXPECT_EQ(id_of(sink_.guest[1].msg), 2);
  EXPECT_EQ(sink_.guest[1].to.token, 2u);
}

// An idle gate holds nothing in proportion to dns_in_flight: slots are made
// on first use, so the bound costs memory only when queries fill it.
TEST_F(GateTest, IdleGateCostsTheSameWhateverItsInFlightLimit) {
  auto bytes_for = [&](const std::string& limits) {
    make("[dns]\nupstreams = [\"192.0.2.1\"]\n[limits]\n" + limits);
    gate_.reset();
    abox::testing::AllocationCounter allocs;
    gate_ = std::make_unique<DnsGate>(*policy_, host_, policy_->dns().upstreams, *table_, events_, random_,
                                      sink_);
    return allocs.bytes();
  };
  const std::size_t small = bytes_for("dns_in_flight = 1\n");
  const std::size_t large = bytes_for("dns_in_flight = 65536\n");
  EXPECT_EQ(large, small);
  EXPECT_EQ(gate_->capacity(), 65536u);
}

// Slots made on demand still stop at the limit, and a freed one is reused
// before a new one is made.
TEST_F(GateTest, SlotsGrowOnDemandUpToTheLimitAndAreReused) {
  make("[dns]\nupstreams = [\"192.0.2.1\"]\n[limits]\ndns_in_flight = 3\n");
  EXPECT_EQ(gate_->capacity(), 3u);
  query(1, make_query(1, "a.example.com", rr_type::A));
  query(2, make_query(2, "b.example.com", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 2u);
  EXPECT_EQ(sink_.upstream[0].slot, 0u);
  EXPECT_EQ(sink_.upstream[1].slot, 1u);
  auto up = sink_.upstream[0];
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {"a.example.com. 60 IN A 93.184.215.14"}), now_);
  query(3, make_query(3, "c.example.com", rr_type::A));
  query(4, make_query(4, "d.example.com", rr_type::A));
  query(5, make_query(5, "e.example.com", rr_type::A));
  query(6, make_query(6, "f.example.com", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 4u);
  EXPECT_EQ(sink_.upstream[2].slot, 0u);  // the freed slot first
  EXPECT_EQ(sink_.upstream[3].slot, 2u);  // then a new one, the last allowed
  EXPECT_EQ(gate_->in_flight(), 3u);
  EXPECT_EQ(gate_->counters().in_flight_full, 2u);
  // Every slot handed out answers its guest.
  for (std::size_t i = 1; i < sink_.upstream.size(); ++i) {
    up = sink_.upstream[i];
    gate_->on_upstream_reply(up.slot, make_answer(up.msg, {}, rcode::NXDOMAIN), now_);
  }
  EXPECT_EQ(gate_->in_flight(), 0u);
}

TEST_F(GateTest, InFlightLimitRefusesNewWork) {
  make("[dns]\nupstreams = [\"192.0.2.1\"]\n[limits]\ndns_in_flight = 2\n");
  query(1, make_query(1, "a.example.com", rr_type::A));
  query(2, make_query(2, "b.example.com", rr_type::A));
  query(3, make_query(3, "c.example.com", rr_type::A));
  EXPECT_EQ(sink_.upstream.size(), 2u);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(sink_.guest[0].to.token, 3u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::SERVFAIL);
  EXPECT_EQ(gate_->counters().in_flight_full, 1u);
  // The flows in flight still complete.
  auto up = sink_.upstream[0];
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {"a.example.com. 60 IN A 93.184.215.14"}), now_);
  EXPECT_EQ(rcode_of(sink_.guest.at(1).msg), rcode::NOERROR);
}

TEST_F(GateTest, TruncatedUpstreamAnswerIsAskedAgainOverTcp) {
  query(1, make_query(1, "big.example.com", rr_type::A));
  auto up = sink_.upstream.at(0);
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {}, rcode::NOERROR, true), now_);
  ASSERT_EQ(sink_.upstream.size(), 2u);
  EXPECT_EQ(sink_.upstream[1].transport, Transport::tcp);
  EXPECT_EQ(sink_.upstream[1].upstream, up.upstream);
  EXPECT_EQ(gate_->counters().tcp_retries, 1u);
}

TEST_F(GateTest, LargeAnswerIsTruncatedForSmallUdpGuestsOnly) {
  query(1, make_query(1, "big.example.com", rr_type::A));  // no EDNS: 512 bytes at most
  auto up = sink_.upstream.at(0);
  std::vector<std::string> records;
  for (int i = 1; i <= 60; ++i) records.push_back("big.example.com. 60 IN A 93.184.216." + std::to_string(i));
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, records), now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_LE(sink_.guest[0].msg.size(), 512u);
  EXPECT_TRUE(sink_.guest[0].msg[2] & 0x02);  // TC
  EXPECT_EQ(ancount(sink_.guest[0].msg), 0u);
  // The guest's retry over TCP gets everything, from the cache.
  query(2, make_query(1, "big.example.com", rr_type::A), Transport::tcp);
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(ancount(sink_.guest[1].msg), 60u);
  EXPECT_FALSE(sink_.guest[1].msg[2] & 0x02);
  // A UDP guest advertising 4096 bytes gets it whole too.
  query(3, make_query(3, "big.example.com", rr_type::A, 4096));
  EXPECT_EQ(ancount(sink_.guest.at(2).msg), 60u);
}

TEST_F(GateTest, MalformedQueries) {
  // Too short for a header but with an ID: FORMERR.
  query(1, {0xAB, 0xCD, 0x01});
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::FORMERR);
  EXPECT_EQ(id_of(sink_.guest[0].msg), 0xABCD);
  // Not even an ID: dropped, and the caller is told.
  EXPECT_FALSE(gate_->on_guest_query(std::vector<std::uint8_t>{0x01}, GuestRef{2, Transport::udp}, now_));
  EXPECT_EQ(sink_.guest.size(), 1u);
  // Two questions.
  auto two = make_query(5, "example.com", rr_type::A);
  two[5] = 2;
  query(3, two);
  EXPECT_EQ(rcode_of(sink_.guest.at(1).msg), rcode::FORMERR);
  EXPECT_EQ(gate_->counters().malformed, 3u);
  EXPECT_TRUE(sink_.upstream.empty());
}

TEST_F(GateTest, TypesThatAreNeverForwarded) {
  query(1, make_query(1, "example.com", rr_type::HTTPS));
  query(2, make_query(2, "example.com", rr_type::SVCB));
  query(3, make_query(3, "example.com", rr_type::ANY));
  query(4, make_query(4, "example.com", rr_type::AXFR));
  ASSERT_EQ(sink_.guest.size(), 4u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::NOERROR);
  EXPECT_EQ(ancount(sink_.guest[0].msg), 0u);
  EXPECT_EQ(rcode_of(sink_.guest[1].msg), rcode::NOERROR);
  EXPECT_EQ(rcode_of(sink_.guest[2].msg), rcode::NOTIMP);
  EXPECT_EQ(rcode_of(sink_.guest[3].msg), rcode::REFUSED);
  EXPECT_TRUE(sink_.upstream.empty());
}

TEST_F(GateTest, NameWithEscapedBytesIsRefusedAndLoggedSafely) {
  auto q = make_query(1, "aXb.example.com", rr_type::A);
  q[14] = '.';  // the label "a.b": valid DNS, no canonical form
  query(1, q);
  EXPECT_EQ(rcode_of(sink_.guest.at(0).msg), rcode::REFUSED);
  ASSERT_FALSE(event_lines_.empty());
  EXPECT_NE(event_lines_.back().find("a\\\\046b.example.com"), std::string::npos) << event_lines_.back();
}

// A reloaded policy (set_policy()) is asked from the next question on: a
// name it revokes is refused, even one whose answer is cached; a question
// asked before the reload and answered after it is denied, not recorded.
TEST_F(GateTest, ASetPolicyRevokesNamesForNewQuestionsAndForAnswersInFlight) {
  query(1, make_query(1, "www.example.com", rr_type::A));
  auto up = sink_.upstream.at(0);
  gate_->on_upstream_reply(up.slot, make_answer(up.msg, {"www.example.com. 300 IN A 93.184.215.14"}), now_);
  ASSERT_EQ(rcode_of(sink_.guest.at(0).msg), rcode::NOERROR);
  query(2, make_query(2, "example.com", rr_type::A));  // in flight across the reload
  ASSERT_EQ(sink_.upstream.size(), 2u);

  auto p = policy::parse_policy(
      "[dns]\nupstreams = [\"192.0.2.1\"]\n[[allow]]\nnames = [\"other.net\"]\nports = [443]\n",
      "gate-reloaded.toml");
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  auto reloaded = std::make_unique<policy::Policy>(std::move(p).value());
  gate_->set_policy(*reloaded);

  // Cached before: refused now, from the policy, not the cache.
  query(3, make_query(3, "www.example.com", rr_type::A));
  ASSERT_EQ(sink_.guest.size(), 2u);
  EXPECT_EQ(rcode_of(sink_.guest[1].msg), rcode::REFUSED);
  EXPECT_EQ(gate_->counters().cache_hits, 0u);
  // Asked before, answered after: denied, nothing recorded.
  const auto& in_flight = sink_.upstream[1];
  gate_->on_upstream_reply(in_flight.slot,
                           make_answer(in_flight.msg, {"example.com. 300 IN A 93.184.215.15"}), now_);
  ASSERT_EQ(sink_.guest.size(), 3u);
  EXPECT_EQ(rcode_of(sink_.guest[2].msg), rcode::REFUSED);
  EXPECT_TRUE(table_->names_for(*policy::IpAddress::parse("93.184.215.15"), now_).empty());
  EXPECT_EQ(gate_->in_flight(), 0u);
  // A name the new policy allows is asked upstream.
  query(4, make_query(4, "other.net", rr_type::A));
  EXPECT_EQ(sink_.upstream.size(), 3u);
  gate_.reset();  // before the policy it points to
}

// Audit mode: a name the policy does not allow is asked upstream anyway,
// its answer recorded, with a would_deny event; a name with no canonical
// form is still refused, and a reserved address still leaves the answer.
TEST_F(GateTest, AuditModeAsksForANameThePolicyDoesNotAllowAndSaysSo) {
  make("[mode]\naudit = true\n[dns]\nupstreams = [\"192.0.2.1\"]\n");
  ASSERT_TRUE(gate_->audit());
  query(1, make_query(1, "evil.org", rr_type::A));
  ASSERT_EQ(sink_.upstream.size(), 1u);
  auto up = sink_.upstream[0];
  gate_->on_upstream_reply(
      up.slot, make_answer(up.msg, {"evil.org. 300 IN A 93.184.216.7", "evil.org. 300 IN A 169.254.169.254"}),
      now_);
  ASSERT_EQ(sink_.guest.size(), 1u);
  EXPECT_EQ(rcode_of(sink_.guest[0].msg), rcode::NOERROR);
  EXPECT_EQ(ancount(sink_.guest[0].msg), 1u) << "the metadata address is removed in audit mode too";
  const auto names = table_->names_for(*policy::IpAddress::parse("93.184.216.7"), now_);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "evil.org");
  EXPECT_EQ(gate_->counters().would_deny, 1u);
  EXPECT_EQ(gate_->counters().denied, 0u);
  bool said = false;
  for (const auto& e : event_lines_) {
    said |= e.find("\"kind\":\"would_deny\"") != std::string::npos &&
            e.find("\"name\":\"evil.org\"") != std::string::npos &&
            e.find("\"audit\":true") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace abox::dns
