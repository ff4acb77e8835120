// Tests for dns/answer_filter: upstream answers are built with ldns from
// presentation-form records (so each test reads like a zone snippet), or by
// hand, byte by byte, where the shape is one ldns would never write (the
// malformed messages the filter must refuse). Every filtered answer is parsed
// back with ldns and checked record by record: what the guest would see.
#include "dns/answer_filter.h"

#include <gtest/gtest.h>

#include "tests/support/ldns.h"
// clang-format on

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/policy_file.h"
#include "tests/support/dns_names.h"

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kId = 0x4A7B;
constexpr std::uint16_t kTypeA = 1;
constexpr std::uint16_t kTypeAAAA = 28;
constexpr std::uint16_t kTypeTXT = 16;
constexpr std::uint16_t kClassIn = 1;

struct RrFree {
  void operator()(ldns_rr* rr) const { ldns_rr_free(rr); }
};
struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
struct CFree {
  void operator()(void* p) const { std::free(p); }
};
using RrPtr = std::unique_ptr<ldns_rr, RrFree>;
using PktPtr = std::unique_ptr<ldns_pkt, PktFree>;

const policy::Policy& plain_policy() {
  static const policy::Policy p = [] {
    auto r = policy::parse_policy("[[allow]]\nnames=[\"example.com\",\"*.example.com\"]\nports=[443]\n",
                                  "test.toml");
    if (!r.ok()) std::abort();
    return std::move(r).value();
  }();
  return p;
}

const policy::Policy& lifting_policy() {
  static const policy::Policy p = [] {
    auto r = policy::parse_policy(
        "[[allow]]\nnames=[\"example.com\",\"*.example.com\"]\nports=[443]\n"
        "[unsafe]\nallow_reserved=[\"127.0.0.0/8\"]\n",
        "test.toml");
    if (!r.ok()) std::abort();
    return std::move(r).value();
  }();
  return p;
}

using abox::testing::wire_name;

// What the gate asked; owns the name the AskedQuestion points into.
struct Asked {
  Bytes name;
  AskedQuestion q;
  Asked(std::string_view n, std::uint16_t type, std::uint16_t id = kId) : name(wire_name(n)) {
    q.id = id;
    q.qname_wire = name;
    q.qtype = type;
    q.qclass = kClassIn;
  }
  Asked(const Asked&) = delete;
  Asked& operator=(const Asked&) = delete;
};

// An upstream answer described in presentation form.
struct Upstream {
  std::uint16_t id = kId;
  bool qr = true;
  bool tc = false;
  std::uint8_t rcode = 0;
  std::string question = "example.com. IN A";
  std::vector<std::string> answer, authority, additional;
  bool edns = false;
  std::uint16_t edns_udp = 1232;
  bool edns_do = false;
  std::uint8_t edns_extended_rcode = 0;
  Bytes edns_options;  // raw option bytes
};

RrPtr rr_from(const std::string& text) {
  ldns_rr* raw = nullptr;
  ldns_status st = ldns_rr_new_frm_str(&raw, text.c_str(), 3600, nullptr, nullptr);
  RrPtr rr(raw);
  if (st != LDNS_STATUS_OK)
    ADD_FAILURE() << "ldns cannot read \"" << text << "\": " << ldns_get_errorstr_by_id(st);
  return rr;
}

Bytes build(const Upstream& u) {
  PktPtr pkt(ldns_pkt_new());
  ldns_pkt_set_id(pkt.get(), u.id);
  ldns_pkt_set_qr(pkt.get(), u.qr);
  ldns_pkt_set_rd(pkt.get(), true);
  ldns_pkt_set_ra(pkt.get(), true);
  ldns_pkt_set_tc(pkt.get(), u.tc);
  ldns_pkt_set_rcode(pkt.get(), u.rcode);
  ldns_rr* q = nullptr;
  EXPECT_EQ(ldns_rr_new_question_frm_str(&q, u.question.c_str(), nullptr, nullptr), LDNS_STATUS_OK);
  ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_QUESTION, q);
  auto add = [&](const std::vector<std::string>& rrs, ldns_pkt_section s) {
    for (const auto& t : rrs) {
      RrPtr rr = rr_from(t);
      if (rr && ldns_pkt_push_rr(pkt.get(), s, rr.get())) (void)rr.release();
    }
  };
  add(u.answer, LDNS_SECTION_ANSWER);
  add(u.authority, LDNS_SECTION_AUTHORITY);
  add(u.additional, LDNS_SECTION_ADDITIONAL);
  if (u.edns) {
    ldns_pkt_set_edns_udp_size(pkt.get(), u.edns_udp);
    ldns_pkt_set_edns_do(pkt.get(), u.edns_do);
    ldns_pkt_set_edns_extended_rcode(pkt.get(), u.edns_extended_rcode);
    if (!u.edns_options.empty()) {
      ldns_pkt_set_edns_data(pkt.get(), ldns_rdf_new_frm_data(LDNS_RDF_TYPE_UNKNOWN, u.edns_options.size(),
                                                              u.edns_options.data()));
    }
  }
  std::uint8_t* raw = nullptr;
  std::size_t size = 0;
  EXPECT_EQ(ldns_pkt2wire(&raw, pkt.get(), &size), LDNS_STATUS_OK);
  std::unique_ptr<std::uint8_t, CFree> wire(raw);
  return Bytes(wire.get(), wire.get() + size);
}

const policy::HostAddresses kNoHostAddresses;

base::Result<FilteredAnswer, FilterError> run(const Bytes& msg, const Asked& asked,
                                              const policy::Policy& p = plain_policy(),
                                              const policy::HostAddresses& host = kNoHostAddresses) {
  return filter_upstream_answer(msg, asked.q, p, host);
}

// The filtered answer as the guest sees it.
struct Seen {
  PktPtr pkt;
  explicit Seen(const Bytes& wire) {
    ldns_pkt* raw = nullptr;
    EXPECT_EQ(ldns_wire2pkt(&raw, wire.data(), wire.size()), LDNS_STATUS_OK);
    pkt.reset(raw);
  }
  // One line per record: "owner ttl class type rdata", tabs as ldns prints.
  std::vector<std::string> lines(ldns_rr_list* list) const {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < ldns_rr_list_rr_count(list); ++i) {
      std::unique_ptr<char, CFree> s(ldns_rr2str(ldns_rr_list_rr(list, i)));
      std::string line(s.get());
      if (!line.empty() && line.back() == '\n') line.pop_back();
      std::replace(line.begin(), line.end(), '\t', ' ');
      out.push_back(line);
    }
    return out;
  }
  std::vector<std::string> answer() const { return lines(ldns_pkt_answer(pkt.get())); }
  std::vector<std::string> authority() const { return lines(ldns_pkt_authority(pkt.get())); }
  std::vector<std::string> additional() const { return lines(ldns_pkt_additional(pkt.get())); }
  std::size_t count_type(ldns_rr_type t) const {
    std::size_t n = 0;
    for (ldns_rr_list* l :
         {ldns_pkt_answer(pkt.get()), ldns_pkt_authority(pkt.get()), ldns_pkt_additional(pkt.get())})
      for (std::size_t i = 0; i < ldns_rr_list_rr_count(l); ++i)
        if (ldns_rr_get_type(ldns_rr_list_rr(l, i)) == t) ++n;
    return n;
  }
};

std::vector<std::string> addresses_of(const FilteredAnswer& a) {
  std::vector<std::string> out;
  for (const auto& x : a.addresses) out.push_back(x.address.to_string());
  return out;
}

using Lines = std::vector<std::string>;

// Issue 15: an answer naming an address of the host the gate runs on (its
// public outside address, an address on its loopback) reached the guest and
// the AnswerTable. Removed as rebinding, under the host's own entry, and no
// [unsafe] lifts it.
TEST(AnswerFilterTest, AddressesOfThisHostAreRemovedAsRebinding) {
  policy::HostAddresses host;
  ASSERT_TRUE(host.add(*policy::IpAddress::parse("93.184.216.34")));
  ASSERT_TRUE(host.add(*policy::IpAddress::parse("127.0.0.1")));  // in a range [unsafe] lifts below
  ASSERT_TRUE(host.add(*policy::IpAddress::parse("2001:4860::1")));
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.216.34", "example.com. 300 IN A 93.184.216.35",
              "example.com. 300 IN A 127.0.0.1"};
  auto r = run(build(u), asked, lifting_policy(), host);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.216.35"});
  ASSERT_EQ(r->rebinding.size(), 2u);
  for (const auto& removed : r->rebinding) {
    EXPECT_EQ(removed.range, &policy::HostAddresses::range()) << removed.address.to_string();
    EXPECT_TRUE(removed.range->never_lifted);
  }
  EXPECT_EQ(Seen(r->wire).answer(), Lines{"example.com. 300 IN A 93.184.216.35"});
  Asked asked6("example.com", kTypeAAAA);
  Upstream u6;
  u6.question = "example.com. IN AAAA";
  u6.answer = {"example.com. 300 IN AAAA 2001:4860::1"};
  auto r6 = run(build(u6), asked6, plain_policy(), host);
  ASSERT_TRUE(r6.ok());
  EXPECT_TRUE(r6->addresses.empty());
  ASSERT_EQ(r6->rebinding.size(), 1u);
  // The same answer without the host's addresses keeps them all.
  auto plain = run(build(u), asked, lifting_policy());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->addresses.size(), 3u);
}

// ---------------------------------------------------------------------------
// Plain answers

TEST(AnswerFilterTest, PlainA) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r->rcode, 0);
  EXPECT_FALSE(r->truncated);
  ASSERT_EQ(r->addresses.size(), 1u);
  EXPECT_EQ(r->addresses[0].address.to_string(), "93.184.215.14");
  EXPECT_EQ(r->addresses[0].ttl, 300u);
  EXPECT_FALSE(r->addresses[0].lifted);
  EXPECT_TRUE(r->rebinding.empty());
  EXPECT_EQ(r->stripped_records, 0u);
  EXPECT_EQ(r->cache_ttl, 300u);

  ASSERT_GE(r->wire.size(), 12u);
  EXPECT_EQ(r->wire[0], 0);  // ID 0: the caller patches it per guest
  EXPECT_EQ(r->wire[1], 0);
  Seen seen(r->wire);
  EXPECT_TRUE(ldns_pkt_qr(seen.pkt.get()));
  EXPECT_TRUE(ldns_pkt_rd(seen.pkt.get()));
  EXPECT_TRUE(ldns_pkt_ra(seen.pkt.get()));
  EXPECT_EQ(seen.answer(), Lines{"example.com. 300 IN A 93.184.215.14"});
  EXPECT_EQ(ldns_rr_list_rr_count(ldns_pkt_question(seen.pkt.get())), 1u);
  EXPECT_FALSE(ldns_pkt_edns(seen.pkt.get()));  // upstream had no OPT: none added
}

TEST(AnswerFilterTest, PlainAaaa) {
  Asked asked("example.com", kTypeAAAA);
  Upstream u;
  u.question = "example.com. IN AAAA";
  u.answer = {"example.com. 120 IN AAAA 2606:2800:21f:cb07:6820:80da:af6b:8b2c"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(addresses_of(*r), Lines{"2606:2800:21f:cb07:6820:80da:af6b:8b2c"});
  EXPECT_EQ(r->addresses[0].ttl, 120u);
  EXPECT_EQ(Seen(r->wire).answer(), Lines{"example.com. 120 IN AAAA 2606:2800:21f:cb07:6820:80da:af6b:8b2c"});
}

TEST(AnswerFilterTest, SeveralAddressesAndDuplicates) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14", "example.com. 300 IN A 93.184.215.15",
              "example.com. 600 IN A 93.184.215.14"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  // One entry per address, with the longer TTL; the records stay as sent.
  ASSERT_EQ(addresses_of(*r), (Lines{"93.184.215.14", "93.184.215.15"}));
  EXPECT_EQ(r->addresses[0].ttl, 600u);
  EXPECT_EQ(Seen(r->wire).answer().size(), 3u);
  EXPECT_EQ(r->cache_ttl, 300u);
}

// ---------------------------------------------------------------------------
// Rebinding: every reserved shape is removed and reported, the public address
// beside it stays.

struct RebindCase {
  const char* address;
  bool v6;
};

class AnswerFilterRebindingTest : public ::testing::TestWithParam<RebindCase> {};

TEST_P(AnswerFilterRebindingTest, ReservedAddressRemovedPublicKept) {
  const RebindCase& c = GetParam();
  const std::uint16_t qtype = c.v6 ? kTypeAAAA : kTypeA;
  const std::string type = c.v6 ? "AAAA" : "A";
  const std::string pub = c.v6 ? "2606:2800:21f:cb07:6820:80da:af6b:8b2c" : "93.184.215.14";
  Asked asked("www.example.com", qtype);
  Upstream u;
  u.question = "www.example.com. IN " + type;
  u.answer = {"www.example.com. 300 IN " + type + " " + c.address,
              "www.example.com. 300 IN " + type + " " + pub,
              "www.example.com. 300 IN RRSIG " + type +
                  " 13 3 300 20300101000000 20200101000000 12345 example.com. AAAA"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(addresses_of(*r), Lines{pub});
  ASSERT_EQ(r->rebinding.size(), 1u);
  EXPECT_EQ(r->rebinding[0].address, *policy::IpAddress::parse(c.address));
  EXPECT_EQ(r->rebinding[0].owner, "www.example.com.");
  ASSERT_NE(r->rebinding[0].range, nullptr);
  EXPECT_TRUE(r->rebinding[0].range->range.contains(r->rebinding[0].address));
  // The RRSIG over the RRset that lost a member goes too; the removed address
  // itself is reported, not counted.
  EXPECT_EQ(r->stripped_records, 1u);
  Seen seen(r->wire);
  EXPECT_EQ(seen.answer(), Lines{"www.example.com. 300 IN " + type + " " + pub});
}

INSTANTIATE_TEST_SUITE_P(EveryTarget, AnswerFilterRebindingTest,
                         ::testing::Values(RebindCase{"127.0.0.1", false}, RebindCase{"10.1.2.3", false},
                                           RebindCase{"172.16.0.1", false}, RebindCase{"192.168.1.1", false},
                                           RebindCase{"169.254.169.254", false},
                                           RebindCase{"100.64.0.1", false}, RebindCase{"0.0.0.0", false},
                                           RebindCase{"224.0.0.1", false}, RebindCase{"::1", true},
                                           RebindCase{"::ffff:10.0.0.1", true},
                                           RebindCase{"64:ff9b::a00:1", true}, RebindCase{"fc00::1", true},
                                           RebindCase{"fe80::1", true}));

// Issue 21: every reserved IPv6 range the gate must keep out of AAAA answers,
// each at both of its ends (the neighbours outside are in
// tests/policy/reserved_ranges_test.cc, which checks the table itself).
INSTANTIATE_TEST_SUITE_P(
    EveryIpv6Range, AnswerFilterRebindingTest,
    ::testing::Values(RebindCase{"::", true},   // unspecified
                      RebindCase{"::1", true},  // loopback
                      RebindCase{"fe80::", true},
                      RebindCase{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // link-local
                      RebindCase{"fc00::", true},
                      RebindCase{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // ULA
                      RebindCase{"ff00::", true}, RebindCase{"ff02::1", true},
                      RebindCase{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // multicast
                      RebindCase{"2001:db8::", true},
                      RebindCase{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true}, RebindCase{"3fff::", true},
                      RebindCase{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // documentation
                      RebindCase{"100::", true}, RebindCase{"100::ffff:ffff:ffff:ffff", true},  // discard
                      RebindCase{"::ffff:0.0.0.0", true}, RebindCase{"::ffff:93.184.215.14", true},
                      RebindCase{"::ffff:255.255.255.255", true},                          // IPv4-mapped
                      RebindCase{"::0.0.0.2", true}, RebindCase{"::93.184.215.14", true},  // IPv4-compatible
                      RebindCase{"64:ff9b::", true}, RebindCase{"64:ff9b::93.184.215.14", true},
                      RebindCase{"64:ff9b::ffff:ffff", true},  // NAT64 well-known
                      RebindCase{"64:ff9b:1::", true},
                      RebindCase{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", true},  // NAT64 local
                      RebindCase{"2002::", true}, RebindCase{"2002:a00:1::1", true},
                      RebindCase{"2002:a9fe:a9fe::1", true},
                      RebindCase{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // 6to4
                      RebindCase{"2001::", true}, RebindCase{"2001:0:4136:e378:8000:63bf:3fff:fdd2", true},
                      RebindCase{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", true},  // Teredo
                      RebindCase{"fec0::", true},
                      RebindCase{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},  // site-local
                      RebindCase{"fd00:ec2::254", true}));                          // metadata

// The neighbours just outside the ranges that border global unicast are kept.
TEST(AnswerFilterTest, Ipv6NeighboursOfReservedRangesAreKept) {
  Asked asked("www.example.com", kTypeAAAA);
  Upstream u;
  u.question = "www.example.com. IN AAAA";
  const Lines outside = {"2000::",     "2001:200::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
                         "2001:db9::", "2003::",     "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                         "3fff:1000::"};
  for (const std::string& a : outside) u.answer.push_back("www.example.com. 300 IN AAAA " + a);
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(addresses_of(*r), outside);
  EXPECT_TRUE(r->rebinding.empty());
}

TEST(AnswerFilterTest, AllReservedLeavesNoData) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 127.0.0.1", "example.com. 300 IN A 169.254.169.254"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->addresses.empty());
  EXPECT_EQ(r->rebinding.size(), 2u);
  EXPECT_TRUE(Seen(r->wire).answer().empty());
  // What is left is NODATA without SOA: cached as briefly as the policy allows.
  EXPECT_EQ(r->cache_ttl, plain_policy().dns().min_ttl);
}

TEST(AnswerFilterTest, LiftedAddressKeptAndMarked) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 127.0.0.1", "example.com. 300 IN A 10.0.0.1"};
  auto r = run(build(u), asked, lifting_policy());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(addresses_of(*r), Lines{"127.0.0.1"});
  EXPECT_TRUE(r->addresses[0].lifted);
  ASSERT_EQ(r->rebinding.size(), 1u);  // 10/8 is not lifted
  EXPECT_EQ(r->rebinding[0].address.to_string(), "10.0.0.1");
  EXPECT_EQ(Seen(r->wire).answer(), Lines{"example.com. 300 IN A 127.0.0.1"});
}

// ---------------------------------------------------------------------------
// CNAME and DNAME chains

std::string hop(int i) {
  return "c" + std::to_string(i) + ".cdn.example.net.";
}

TEST(AnswerFilterTest, TenHopChainKeepsAddressesInAnyOrder) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  // Addresses first and links reversed: the chain does not depend on order.
  u.answer.push_back(hop(10) + " 60 IN A 151.101.1.7");
  u.answer.push_back(hop(10) + " 60 IN A 104.16.0.9");
  for (int i = 10; i >= 2; --i) u.answer.push_back(hop(i - 1) + " 300 IN CNAME " + hop(i));
  u.answer.push_back("www.example.com. 300 IN CNAME " + hop(1));
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), (Lines{"151.101.1.7", "104.16.0.9"}));
  EXPECT_EQ(r->stripped_records, 0u);
  Seen seen(r->wire);
  EXPECT_EQ(seen.answer().size(), 12u);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_CNAME), 10u);
  EXPECT_EQ(r->cache_ttl, 60u);
}

TEST(AnswerFilterTest, AddressOnIntermediateChainNameIsAnswered) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer = {"www.example.com. 300 IN CNAME a.example.net.", "a.example.net. 300 IN CNAME b.example.net.",
              "a.example.net. 300 IN A 192.0.2.200", "b.example.net. 300 IN A 151.101.1.1"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  // 192.0.2.0/24 is documentation (reserved); the on-chain public one stays.
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.1"});
  ASSERT_EQ(r->rebinding.size(), 1u);
  EXPECT_EQ(r->rebinding[0].owner, "a.example.net.");
}

TEST(AnswerFilterTest, CnameLoopEnds) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN CNAME a.example.net.", "a.example.net. 300 IN CNAME b.example.net.",
              "b.example.net. 300 IN CNAME example.com.", "b.example.net. 300 IN A 151.101.1.1"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.1"});
  EXPECT_EQ(Seen(r->wire).count_type(LDNS_RR_TYPE_CNAME), 3u);
}

TEST(AnswerFilterTest, SelfLoop) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN CNAME example.com.", "example.com. 300 IN A 151.101.1.1"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.1"});
}

TEST(AnswerFilterTest, ChainLongerThanSixteenIsCut) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer.push_back("www.example.com. 300 IN CNAME " + hop(1));
  for (int i = 1; i < 20; ++i) u.answer.push_back(hop(i) + " 300 IN CNAME " + hop(i + 1));
  u.answer.push_back(hop(16) + " 300 IN A 151.101.1.16");  // 16 hops from the question: still on the chain
  u.answer.push_back(hop(17) + " 300 IN A 151.101.1.17");  // 17 hops: not
  u.answer.push_back(hop(20) + " 300 IN A 151.101.1.20");
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.16"});
  // Off the (cut) chain: the CNAMEs owned by c17..c19 and two addresses. The
  // CNAME owned by c16 stays: it is the last link's record, only not followed.
  EXPECT_EQ(r->stripped_records, 5u);
  Seen seen(r->wire);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_A), 1u);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_CNAME), 17u);
}

TEST(AnswerFilterTest, DnameWithSynthesizedCname) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer = {"example.com. 300 IN DNAME example.net.", "www.example.com. 300 IN CNAME www.example.net.",
              "www.example.net. 300 IN A 151.101.1.5"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.5"});
  EXPECT_EQ(r->stripped_records, 0u);
  EXPECT_EQ(Seen(r->wire).answer().size(), 3u);
}

TEST(AnswerFilterTest, DnameWithoutCnameIsFollowed) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer = {"example.com. 300 IN DNAME example.net.", "www.example.net. 300 IN A 151.101.1.5",
              "ftp.example.net. 300 IN A 151.101.1.6"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.5"});
  EXPECT_EQ(r->stripped_records, 1u);
}

TEST(AnswerFilterTest, UnrelatedDnameStripped) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer = {"example.org. 300 IN DNAME example.net.", "www.example.com. 300 IN A 151.101.1.5"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stripped_records, 1u);
  EXPECT_EQ(Seen(r->wire).answer(), Lines{"www.example.com. 300 IN A 151.101.1.5"});
}

// ---------------------------------------------------------------------------
// What the gate does not vouch for

TEST(AnswerFilterTest, OffChainRecordsRemoved) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14", "evil.example.org. 300 IN A 151.101.1.66",
              "other.example.com. 300 IN AAAA 2001:4860::1", "evil.example.org. 300 IN CNAME example.com.",
              "evil.example.org. 300 IN TXT \"hello\""};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.215.14"});
  EXPECT_TRUE(r->rebinding.empty());
  EXPECT_EQ(r->stripped_records, 4u);
  EXPECT_EQ(Seen(r->wire).answer(), Lines{"example.com. 300 IN A 93.184.215.14"});
}

TEST(AnswerFilterTest, GlueRemovedNsKept) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  u.authority = {"example.com. 3600 IN NS ns1.example.com.", "example.com. 3600 IN A 151.101.1.99"};
  u.additional = {
      "ns1.example.com. 3600 IN A 10.0.0.53", "ns1.example.com. 3600 IN AAAA 2001:db8::53",
      "ns1.example.com. 3600 IN RRSIG A 13 3 3600 20300101000000 20200101000000 12345 example.com. AAAA",
      "ns1.example.com. 3600 IN TXT \"kept\""};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.215.14"});
  EXPECT_TRUE(r->rebinding.empty());  // glue is not answered for the name: stripped, not reported
  EXPECT_EQ(r->stripped_records, 4u);
  Seen seen(r->wire);
  EXPECT_EQ(seen.authority(), Lines{"example.com. 3600 IN NS ns1.example.com."});
  EXPECT_EQ(seen.additional(), Lines{"ns1.example.com. 3600 IN TXT \"kept\""});
}

TEST(AnswerFilterTest, HttpsAndSvcbRemovedWithTheirSignatures) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {
      "example.com. 300 IN A 93.184.215.14",
      "example.com. 300 IN RRSIG A 13 2 300 20300101000000 20200101000000 12345 example.com. AAAA",
      "example.com. 300 IN HTTPS 1 . alpn=h2 ipv4hint=127.0.0.1",
      "example.com. 300 IN RRSIG HTTPS 13 2 300 20300101000000 20200101000000 12345 example.com. AAAA",
      "example.com. 300 IN SVCB 1 svc.example.com. ipv6hint=::1"};
  u.authority = {"example.com. 300 IN SVCB 0 svc.example.net."};
  u.additional = {
      "svc.example.com. 300 IN HTTPS 1 . ech=AAAA",
      "svc.example.com. 300 IN RRSIG SVCB 13 3 300 20300101000000 20200101000000 1 example.com. AAAA"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.215.14"});
  EXPECT_TRUE(r->rebinding.empty());  // hints are not addresses we answer: stripped whole
  EXPECT_EQ(r->stripped_records, 6u);
  Seen seen(r->wire);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_HTTPS), 0u);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_SVCB), 0u);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_RRSIG), 1u);  // the one over the intact A RRset
}

TEST(AnswerFilterTest, HttpsQueryAnswersNothing) {
  Asked asked("example.com", 65);
  Upstream u;
  u.question = "example.com. IN HTTPS";
  u.answer = {"example.com. 300 IN HTTPS 1 . alpn=h2"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stripped_records, 1u);
  EXPECT_TRUE(Seen(r->wire).answer().empty());
  EXPECT_EQ(r->cache_ttl, plain_policy().dns().min_ttl);  // NODATA now
}

TEST(AnswerFilterTest, OtherTypesOnChainKept) {
  Asked asked("example.com", kTypeTXT);
  Upstream u;
  u.question = "example.com. IN TXT";
  u.answer = {"example.com. 300 IN TXT \"v=spf1 -all\"", "example.com. 300 IN MX 10 mail.example.com."};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->addresses.empty());
  EXPECT_EQ(r->stripped_records, 0u);
  EXPECT_EQ(Seen(r->wire).answer().size(), 2u);
}

TEST(AnswerFilterTest, AddressOfAnotherClassIsNoAddress) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14", "example.com. 300 CH A 10.0.0.1"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.215.14"});
  EXPECT_EQ(r->stripped_records, 1u);
}

// ---------------------------------------------------------------------------
// TTLs

TEST(AnswerFilterTest, TtlsClampedBothWays) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "www.example.com. IN A";
  u.answer = {"www.example.com. 0 IN CNAME a.example.net.", "a.example.net. 1 IN A 151.101.1.1",
              "a.example.net. 999999 IN A 151.101.1.2"};
  u.authority = {"example.net. 604800 IN NS ns.example.net."};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  const auto& dns = plain_policy().dns();
  ASSERT_EQ(r->addresses.size(), 2u);
  EXPECT_EQ(r->addresses[0].ttl, dns.min_ttl);
  EXPECT_EQ(r->addresses[1].ttl, dns.max_ttl);
  EXPECT_EQ(r->cache_ttl, dns.min_ttl);
  Seen seen(r->wire);
  auto lo = std::to_string(dns.min_ttl), hi = std::to_string(dns.max_ttl);
  EXPECT_EQ(seen.answer(), (Lines{"www.example.com. " + lo + " IN CNAME a.example.net.",
                                  "a.example.net. " + lo + " IN A 151.101.1.1",
                                  "a.example.net. " + hi + " IN A 151.101.1.2"}));
  EXPECT_EQ(seen.authority(), Lines{"example.net. " + hi + " IN NS ns.example.net."});
}

TEST(AnswerFilterTest, TtlWithTopBitIsZero) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 2147483648 IN A 93.184.215.14"};  // RFC 2181: read as 0, not 68 years
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->addresses[0].ttl, plain_policy().dns().min_ttl);
}

TEST(AnswerFilterTest, NxdomainUsesSoaNegativeTtl) {
  Asked asked("nope.example.com", kTypeA);
  Upstream u;
  u.rcode = 3;
  u.question = "nope.example.com. IN A";
  u.authority = {"example.com. 900 IN SOA ns.example.com. hostmaster.example.com. 1 7200 3600 1209600 300"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rcode, 3);
  EXPECT_EQ(r->cache_ttl, 300u);  // min(SOA TTL 900, MINIMUM 300)
  Seen seen(r->wire);
  EXPECT_EQ(ldns_pkt_get_rcode(seen.pkt.get()), LDNS_RCODE_NXDOMAIN);
  EXPECT_EQ(seen.authority().size(), 1u);

  u.authority = {"example.com. 60 IN SOA ns.example.com. hostmaster.example.com. 1 7200 3600 1209600 300"};
  r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cache_ttl, 60u);  // the SOA's own TTL is smaller

  u.authority = {
      "example.com. 86400 IN SOA ns.example.com. hostmaster.example.com. 1 7200 3600 1209600 86400"};
  r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cache_ttl, plain_policy().dns().max_ttl);  // clamped
}

TEST(AnswerFilterTest, NxdomainAfterCname) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.rcode = 3;
  u.question = "www.example.com. IN A";
  u.answer = {"www.example.com. 30 IN CNAME gone.example.net."};
  u.authority = {"example.net. 900 IN SOA ns.example.net. hostmaster.example.net. 1 7200 3600 1209600 600"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cache_ttl, 30u);
}

TEST(AnswerFilterTest, NodataWithAndWithoutSoa) {
  Asked asked("example.com", kTypeAAAA);
  Upstream u;
  u.question = "example.com. IN AAAA";
  u.authority = {"example.com. 3600 IN SOA ns.example.com. hostmaster.example.com. 1 7200 3600 1209600 120"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rcode, 0);
  EXPECT_TRUE(r->addresses.empty());
  EXPECT_EQ(r->cache_ttl, 120u);

  u.authority.clear();
  r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cache_ttl, plain_policy().dns().min_ttl);
}

TEST(AnswerFilterTest, ServfailPassedThrough) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.rcode = 2;
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rcode, 2);
  EXPECT_EQ(r->cache_ttl, plain_policy().dns().min_ttl);
  EXPECT_EQ(ldns_pkt_get_rcode(Seen(r->wire).pkt.get()), LDNS_RCODE_SERVFAIL);
}

// ---------------------------------------------------------------------------
// Not our answer

TEST(AnswerFilterTest, IdMismatch) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.id = kId + 1;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  auto r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::id_mismatch);
}

TEST(AnswerFilterTest, QrClear) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.qr = false;
  auto r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::not_a_response);
}

TEST(AnswerFilterTest, OpcodeOtherThanQuery) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  Bytes msg = build(u);
  msg[2] |= 4 << 3;  // NOTIFY
  auto r = run(msg, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::not_a_response);
}

TEST(AnswerFilterTest, QuestionMismatch) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};

  u.question = "example.org. IN A";
  auto r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);

  u.question = "www.example.com. IN A";  // a longer name is a different name
  r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);

  u.question = "example.com. IN AAAA";
  r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);

  u.question = "example.com. CH A";
  r = run(build(u), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);
}

TEST(AnswerFilterTest, QuestionCountMustBeOne) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  Bytes msg = build(u);
  Bytes none(msg.begin(), msg.begin() + 12);
  none[5] = 0;
  auto r = run(none, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);

  Bytes two = msg;
  two[5] = 2;
  two.insert(two.end(), msg.begin() + 12, msg.end());  // the same question twice
  r = run(two, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::question_mismatch);
}

TEST(AnswerFilterTest, MixedCaseQuestionMatches) {
  Asked asked("www.example.com", kTypeA);
  Upstream u;
  u.question = "WwW.ExAmPlE.cOm. IN A";
  u.answer = {"WWW.EXAMPLE.COM. 300 IN CNAME Edge.Example.NET.", "edge.example.net. 300 IN A 151.101.1.1"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(addresses_of(*r), Lines{"151.101.1.1"});
  EXPECT_EQ(r->stripped_records, 0u);
}

TEST(AnswerFilterTest, Garbage) {
  Asked asked("example.com", kTypeA);
  for (const Bytes& msg : {Bytes{}, Bytes{0x4A, 0x7B, 0x81}, Bytes(11, 0xFF)}) {
    auto r = run(msg, asked);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), FilterError::unparsable);
  }
  // Our header, then noise.
  Bytes noise = {0x4A, 0x7B, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 0xC0, 0xFF, 0xC0, 0x0C, 7, 7};
  auto r = run(noise, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);

  // A real answer cut anywhere past the question is unparsable.
  Upstream u;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  Bytes full = build(u);
  for (std::size_t n = 30; n < full.size(); ++n) {
    auto cut = run(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)), asked);
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_EQ(cut.error(), FilterError::unparsable) << n;
  }
}

// ---------------------------------------------------------------------------
// Flags and EDNS

TEST(AnswerFilterTest, TruncatedPassedThrough) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.tc = true;
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->truncated);
  EXPECT_TRUE(ldns_pkt_tc(Seen(r->wire).pkt.get()));
}

TEST(AnswerFilterTest, EdnsKeptWithOurSizeAndNoOptions) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.edns = true;
  u.edns_udp = 1232;
  u.edns_do = true;
  u.edns_options = {0x00, 0x0A, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8};  // a client cookie
  u.answer = {"example.com. 300 IN A 93.184.215.14"};
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  Seen seen(r->wire);
  EXPECT_TRUE(ldns_pkt_edns(seen.pkt.get()));
  EXPECT_EQ(ldns_pkt_edns_udp_size(seen.pkt.get()), 4096);
  EXPECT_TRUE(ldns_pkt_edns_do(seen.pkt.get()));
  EXPECT_EQ(ldns_pkt_edns_data(seen.pkt.get()), nullptr);  // options are hop-by-hop
  EXPECT_EQ(ldns_pkt_arcount(seen.pkt.get()), 0u);         // the OPT is not a record to ldns
  EXPECT_EQ(r->wire[11], 1);                               // but it is on the wire
}

TEST(AnswerFilterTest, ExtendedRcode) {
  Asked asked("example.com", kTypeA);
  Upstream u;
  u.edns = true;
  u.edns_extended_rcode = 1;  // with header rcode 0: BADVERS (16)
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rcode, 16);
  EXPECT_EQ(ldns_pkt_edns_extended_rcode(Seen(r->wire).pkt.get()), 1);
}

// ---------------------------------------------------------------------------
// Messages ldns misread when the filter used it: they must stay refused.

struct RawMessage {
  Bytes b = {0x4A, 0x7B, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0};
  RawMessage() {
    Bytes q = wire_name("example.com");
    b.insert(b.end(), q.begin(), q.end());
    b.insert(b.end(), {0, 1, 0, 1});
  }
  void count(int section, std::uint16_t n) {  // 0 answer, 1 authority, 2 additional
    b[6 + 2 * section] = static_cast<std::uint8_t>(n >> 8);
    b[7 + 2 * section] = static_cast<std::uint8_t>(n);
  }
  // A record owned by the question name (a pointer to offset 12).
  void rr(std::uint16_t type, std::uint16_t cls, std::uint32_t ttl, const Bytes& rdata) {
    b.insert(b.end(),
             {0xC0, 0x0C, static_cast<std::uint8_t>(type >> 8), static_cast<std::uint8_t>(type),
              static_cast<std::uint8_t>(cls >> 8), static_cast<std::uint8_t>(cls),
              static_cast<std::uint8_t>(ttl >> 24), static_cast<std::uint8_t>(ttl >> 16),
              static_cast<std::uint8_t>(ttl >> 8), static_cast<std::uint8_t>(ttl),
              static_cast<std::uint8_t>(rdata.size() >> 8), static_cast<std::uint8_t>(rdata.size())});
    b.insert(b.end(), rdata.begin(), rdata.end());
  }
  Bytes record(std::uint16_t type, const Bytes& rdata) const {
    RawMessage m;
    m.b.resize(0);
    m.rr(type, 1, 60, rdata);
    return m.b;
  }
};

TEST(AnswerFilterTest, RawMessageBaselineParses) {
  Asked asked("example.com", kTypeA);
  RawMessage m;
  m.count(0, 1);
  m.rr(kTypeA, 1, 60, {93, 184, 215, 14});
  auto r = run(m.b, asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(addresses_of(*r), Lines{"93.184.215.14"});
}

TEST(AnswerFilterTest, RecordHiddenInLongRdataRefused) {
  // ldns_wire2pkt reads this A's 4 bytes, then parses the rest of its RDATA
  // as the next record: "A 127.0.0.1", which no other resolver would see.
  Asked asked("example.com", kTypeA);
  RawMessage m;
  m.count(0, 2);
  Bytes rdata = {93, 184, 215, 14};
  Bytes hidden = m.record(kTypeA, {127, 0, 0, 1});
  rdata.insert(rdata.end(), hidden.begin(), hidden.end());
  m.rr(kTypeA, 1, 60, rdata);
  m.rr(kTypeA, 1, 60, {1, 2, 3, 4});
  auto r = run(m.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);

  // The same trick in a type the filter does not read itself (MX: a
  // preference and a name; ldns stops after the name).
  RawMessage mx;
  mx.count(0, 2);
  Bytes mx_rdata = {0, 10, 0xC0, 0x0C};
  mx_rdata.insert(mx_rdata.end(), hidden.begin(), hidden.end());
  mx.rr(15, 1, 60, mx_rdata);
  mx.rr(kTypeA, 1, 60, {1, 2, 3, 4});
  r = run(mx.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);
}

TEST(AnswerFilterTest, AddressOfWrongLengthRefused) {
  Asked asked("example.com", kTypeA);
  for (std::size_t n : {0u, 3u, 5u, 16u}) {
    RawMessage m;
    m.count(0, 1);
    m.rr(kTypeA, 1, 60, Bytes(n, 1));
    auto r = run(m.b, asked);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.error(), FilterError::unparsable) << n;
  }
  RawMessage m;
  m.count(0, 1);
  m.rr(kTypeAAAA, 1, 60, Bytes(4, 1));
  auto r = run(m.b, asked);
  ASSERT_FALSE(r.ok());
}

TEST(AnswerFilterTest, TsigRecordsNeverReachTheGuest) {
  // ldns_wire2pkt leaks the first of two TSIGs and skips the last record.
  Asked asked("example.com", kTypeA);
  RawMessage m;
  m.count(0, 1);
  m.count(2, 4);
  m.rr(kTypeA, 1, 60, {93, 184, 215, 14});
  m.rr(kTypeA, 1, 60, {10, 0, 0, 1});  // glue-like: additional
  m.rr(250, 255, 0, {});
  m.rr(250, 255, 0, {});
  m.rr(kTypeTXT, 1, 60, {2, 'h', 'i'});
  auto r = run(m.b, asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stripped_records, 3u);
  Seen seen(r->wire);
  EXPECT_EQ(ldns_pkt_tsig(seen.pkt.get()), nullptr);
  EXPECT_EQ(seen.additional(), Lines{"example.com. 60 IN TXT \"hi\""});
}

TEST(AnswerFilterTest, OptRulesEnforced) {
  Asked asked("example.com", kTypeA);
  const Bytes opt = {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0};  // ".", OPT, 4096, no options

  RawMessage two;  // two OPTs: FORMERR by RFC 6891; 256 of them wrap ldns's counter
  two.count(2, 2);
  two.b.insert(two.b.end(), opt.begin(), opt.end());
  two.b.insert(two.b.end(), opt.begin(), opt.end());
  auto r = run(two.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);

  RawMessage in_answer;
  in_answer.count(0, 1);
  in_answer.b.insert(in_answer.b.end(), opt.begin(), opt.end());
  r = run(in_answer.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);

  RawMessage named;  // OPT owned by a name other than the root
  named.count(2, 1);
  named.rr(41, 4096, 0, {});
  r = run(named.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);
}

TEST(AnswerFilterTest, ManyTinyStringsCostNothing) {
  // 60000 empty character-strings in one TXT: ldns allocated RDATA's length
  // for each (3.6 GB); ours checks them in one pass and copies the RDATA.
  Asked asked("example.com", kTypeTXT);
  RawMessage m;
  m.b[26] = kTypeTXT;  // the question's type
  m.count(0, 1);
  m.rr(kTypeTXT, 1, 60, Bytes(60000, 0));
  auto r = run(m.b, asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  Bytes expected = m.b;  // the same message, ID 0: owner already a pointer, TTL within bounds
  expected[0] = expected[1] = 0;
  EXPECT_EQ(r->wire, expected);

  RawMessage ok;
  ok.b[26] = kTypeTXT;
  ok.count(0, 1);
  Bytes txt;
  for (int i = 0; i < 200; ++i) {
    txt.push_back(255);
    txt.insert(txt.end(), 255, 'x');
  }
  ok.rr(kTypeTXT, 1, 60, txt);
  r = run(ok.b, asked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Seen(r->wire).answer().size(), 1u);

  RawMessage overrun;  // the last string's length runs past RDLENGTH
  overrun.b[26] = kTypeTXT;
  overrun.count(0, 1);
  overrun.rr(kTypeTXT, 1, 60, {2, 'h', 'i', 5, 'x'});
  r = run(overrun.b, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);
}

// A record of a private type whose RDATA is `chain` pointers in a row, each
// aimed at the one before it and the first at the question name, and a CNAME
// whose target is the last: reading that one name follows chain + 1 pointers.
Bytes pointer_chain_message(std::size_t chain) {
  RawMessage m;
  m.count(0, 2);
  const std::size_t rdata_at = m.b.size() + 12;
  Bytes rdata;
  for (std::size_t i = 0; i < chain; ++i) {
    const std::size_t target = i == 0 ? 12 : rdata_at + 2 * (i - 1);
    rdata.push_back(static_cast<std::uint8_t>(0xC0 | (target >> 8)));
    rdata.push_back(static_cast<std::uint8_t>(target));
  }
  m.rr(0xFF00, 1, 60, rdata);
  const std::size_t last = rdata_at + 2 * (chain - 1);
  m.rr(5, 1, 60, {static_cast<std::uint8_t>(0xC0 | (last >> 8)), static_cast<std::uint8_t>(last)});
  return m.b;
}

TEST(AnswerFilterTest, LongPointerChainsRefused) {
  // At most 16 pointers per name (dns/name.h): 17 are refused.
  Asked asked("example.com", kTypeA);
  auto r = run(pointer_chain_message(16), asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::unparsable);

  // Short chains are unusual but valid, and still read.
  r = run(pointer_chain_message(15), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  Seen seen(r->wire);
  EXPECT_EQ(seen.count_type(LDNS_RR_TYPE_CNAME), 1u);
  EXPECT_EQ(seen.answer().back(), "example.com. 60 IN CNAME example.com.");
}

TEST(AnswerFilterTest, LongNamesStillCompress) {
  // ldns's compression table was cubic in the labels of a name; ours is
  // not, and the answer comes out compressed.
  std::string name;
  for (int i = 0; i < 120; ++i) name += "x.";
  name += "example.com";
  Asked asked(name, kTypeTXT);
  Upstream u;
  u.question = name + ". IN TXT";
  for (int i = 0; i < 60; ++i) u.answer.push_back(name + ". 300 IN TXT \"" + std::to_string(i) + "\"");
  auto r = run(build(u), asked);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(Seen(r->wire).answer().size(), 60u);
  EXPECT_LT(r->wire.size(), 12 + 255 + 4 + 60 * 20u);  // owners are 2-byte pointers
}

TEST(AnswerFilterTest, ExpansionPastLimitIsTooLarge) {
  // RRSIG signer names may arrive compressed but are written in full (RFC
  // 3597 and 4034 forbid compressing them), so ~2000 small RRSIGs pointing at
  // a long name become a message over 65535 bytes.
  std::string longname;
  for (int i = 0; i < 4; ++i) longname += std::string(60, 'a' + static_cast<char>(i)) + ".";
  longname += "com";
  Asked asked(longname, kTypeA);
  Bytes msg = {0x4A, 0x7B, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0};
  Bytes q = wire_name(longname);
  msg.insert(msg.end(), q.begin(), q.end());
  msg.insert(msg.end(), {0, 1, 0, 1});
  std::uint16_t n = 0;
  while (msg.size() + 32 <= 65535) {
    // owner: the question name; RRSIG covering NS (type 2), signer: pointer to the question name.
    msg.insert(msg.end(), {0xC0, 0x0C, 0, 46, 0, 1, 0, 0, 0, 60, 0, 20, 0, 2, 13,   2,
                           0,    0,    0, 60, 0, 0, 0, 1, 0, 0,  0, 0,  0, 1, 0xC0, 0x0C});
    ++n;
  }
  msg[8] = static_cast<std::uint8_t>(n >> 8);  // authority
  msg[9] = static_cast<std::uint8_t>(n);
  auto r = run(msg, asked);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), FilterError::too_large);
}

TEST(AnswerFilterTest, ErrorsDescribeThemselves) {
  for (auto e : {FilterError::unparsable, FilterError::not_a_response, FilterError::id_mismatch,
                 FilterError::question_mismatch, FilterError::too_large})
    EXPECT_FALSE(describe(e).empty());
}

}  // namespace
}  // namespace abox::dns
