#include "dns/response_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/ldns.h"

namespace abox::dns {
namespace {

using base::MonoTime;
using base::Seconds;
using Bytes = std::vector<std::uint8_t>;

const MonoTime kT0 = MonoTime{} + std::chrono::hours(1);
MonoTime at_ms(std::int64_t ms) {
  return kT0 + std::chrono::milliseconds(ms);
}
MonoTime at(std::int64_t s) {
  return kT0 + Seconds(s);
}

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;

ldns_rr* rr_from(const std::string& text, bool question) {
  ldns_rr* rr = nullptr;
  const ldns_status s = question ? ldns_rr_new_question_frm_str(&rr, text.c_str(), nullptr, nullptr)
                                 : ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr);
  if (s != LDNS_STATUS_OK)
    ADD_FAILURE() << "ldns could not read \"" << text << "\": " << ldns_get_errorstr_by_id(s);
  return rr;
}

struct AnswerSpec {
  std::string question = "www.example.com. IN A";
  std::vector<std::string> answer;
  std::vector<std::string> authority;
  bool edns = true;
  bool dnssec_ok = false;
};

// A real upstream-shaped answer, encoded by ldns, with ID 0 as the filter
// hands it over.
Bytes build_answer(const AnswerSpec& spec) {
  Pkt pkt(ldns_pkt_new());
  ldns_pkt_set_id(pkt.get(), 0);
  ldns_pkt_set_qr(pkt.get(), true);
  ldns_pkt_set_rd(pkt.get(), true);
  ldns_pkt_set_ra(pkt.get(), true);
  ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_QUESTION, rr_from(spec.question, true));
  for (const auto& t : spec.answer) ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_ANSWER, rr_from(t, false));
  for (const auto& t : spec.authority) ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_AUTHORITY, rr_from(t, false));
  if (spec.edns) {
    ldns_pkt_set_edns_udp_size(pkt.get(), 1232);
    ldns_pkt_set_edns_do(pkt.get(), spec.dnssec_ok);
  }
  std::uint8_t* wire = nullptr;
  std::size_t size = 0;
  if (ldns_pkt2wire(&wire, pkt.get(), &size) != LDNS_STATUS_OK) ADD_FAILURE() << "ldns_pkt2wire failed";
  Bytes out(wire, wire + size);
  std::free(wire);  // NOLINT(cppcoreguidelines-no-malloc): ldns allocates with malloc
  return out;
}

Pkt parse(const Bytes& wire) {
  ldns_pkt* p = nullptr;
  if (ldns_wire2pkt(&p, wire.data(), wire.size()) != LDNS_STATUS_OK) ADD_FAILURE() << "ldns cannot parse";
  return Pkt(p);
}

std::string owner_of_question(const ldns_pkt* p) {
  char* s = ldns_rdf2str(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(p), 0)));
  std::string out(s);
  std::free(s);  // NOLINT(cppcoreguidelines-no-malloc): ldns allocates with malloc
  return out;
}

std::vector<std::uint32_t> ttls(const ldns_rr_list* list) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < ldns_rr_list_rr_count(list); ++i)
    out.push_back(ldns_rr_ttl(ldns_rr_list_rr(list, i)));
  return out;
}

// A parsed query as parse_query() would give it: only the fields the cache
// reads are set. `name` is presentation form without the final dot.
Query make_query(std::string_view name, std::uint16_t id, std::uint16_t qtype = rr_type::A,
                 bool dnssec_ok = false) {
  Query q;
  q.id = id;
  q.qtype = qtype;
  q.qclass = kClassIN;
  q.has_edns = true;
  q.edns_udp_size = 1232;
  q.dnssec_ok = dnssec_ok;
  std::size_t at = 0;
  while (!name.empty()) {
    const std::size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    q.qname_wire[at++] = static_cast<std::uint8_t>(label.size());
    for (char c : label) q.qname_wire[at++] = static_cast<std::uint8_t>(c);
    name = dot == std::string_view::npos ? std::string_view{} : name.substr(dot + 1);
  }
  q.qname_wire[at++] = 0;
  q.qname_wire_len = static_cast<std::uint8_t>(at);
  return q;
}

FilteredAnswer filtered(Bytes wire, std::uint32_t cache_ttl, std::vector<AnsweredAddress> addresses = {}) {
  FilteredAnswer a;
  a.wire = std::move(wire);
  a.cache_ttl = cache_ttl;
  a.addresses = std::move(addresses);
  return a;
}

policy::IpAddress ip(std::string_view text) {
  return policy::IpAddress::parse(text).value_or(policy::IpAddress{});
}

// www.example.com: a CNAME (120 s), the address (300 s), an NS in authority
// (3600 s), and an OPT with DO set whose flags must not be aged.
AnswerSpec www_spec() {
  AnswerSpec s;
  s.answer = {"www.example.com. 120 IN CNAME example.com.", "example.com. 300 IN A 93.184.216.34"};
  s.authority = {"example.com. 3600 IN NS a.iana-servers.net."};
  s.dnssec_ok = true;
  return s;
}

FilteredAnswer www_answer() {
  return filtered(build_answer(www_spec()), 120, {{ip("93.184.216.34"), 300, false}});
}

// Any answer for `name` (lower case), of the given size or a bit more.
FilteredAnswer answer_for(const std::string& name, std::size_t txt_bytes = 0) {
  AnswerSpec s;
  s.question = name + ". IN A";
  s.answer = {name + ". 60 IN A 93.184.216.34"};
  if (txt_bytes > 0) {
    // Character strings hold at most 255 bytes each.
    std::string rr = name + ". 60 IN TXT";
    for (std::size_t left = txt_bytes; left > 0; left -= std::min<std::size_t>(left, 200)) {
      rr += " \"" + std::string(std::min<std::size_t>(left, 200), 'x') + "\"";
    }
    s.answer.push_back(rr);
  }
  s.edns = false;
  return filtered(build_answer(s), 60);
}

TEST(ResponseCache, HitPatchesIdNameAndTtls) {
  ResponseCache cache(16, 1 << 16);
  const FilteredAnswer answer = www_answer();
  cache.insert(make_query("www.example.com", 0x1111, rr_type::A, true), answer, at(0));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), answer.wire.size());

  Bytes out;
  const Query q = make_query("WwW.eXaMpLe.CoM", 0xBEEF, rr_type::A, true);
  auto hit = cache.lookup(q, at(0), out);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->remaining_ttl, 120u);
  ASSERT_EQ(hit->addresses.size(), 1u);
  EXPECT_EQ(hit->addresses[0].address, ip("93.184.216.34"));
  EXPECT_EQ(hit->addresses[0].ttl, 300u);

  ASSERT_EQ(out.size(), answer.wire.size());
  EXPECT_EQ(out[0], 0xBE);
  EXPECT_EQ(out[1], 0xEF);
  EXPECT_TRUE(std::equal(q.qname().begin(), q.qname().end(), out.begin() + kHeaderSize));
  // Nothing else changed at age 0.
  EXPECT_TRUE(std::equal(out.begin() + kHeaderSize + q.qname_wire_len, out.end(),
                         answer.wire.begin() + kHeaderSize + q.qname_wire_len));

  Pkt p = parse(out);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ldns_pkt_id(p.get()), 0xBEEF);
  EXPECT_EQ(owner_of_question(p.get()), "WwW.eXaMpLe.CoM.");
  EXPECT_EQ(ttls(ldns_pkt_answer(p.get())), (std::vector<std::uint32_t>{120, 300}));
  EXPECT_EQ(ttls(ldns_pkt_authority(p.get())), (std::vector<std::uint32_t>{3600}));
  EXPECT_TRUE(ldns_pkt_edns_do(p.get()));
  EXPECT_EQ(cache.counters().hits, 1u);
}

TEST(ResponseCache, TtlsAgeByWholeSeconds) {
  ResponseCache cache(16, 1 << 16);
  cache.insert(make_query("www.example.com", 1, rr_type::A, true), www_answer(), at(0));
  const Query q = make_query("www.example.com", 2, rr_type::A, true);
  Bytes out;

  struct Step {
    std::int64_t ms;
    std::uint32_t age;
  };
  // Sub-second remainders carry over between hits: 0.6 s then 1.2 s is an
  // age of 1, not 0 + 0.
  for (const Step step :
       {Step{600, 0}, Step{1200, 1}, Step{1999, 1}, Step{2000, 2}, Step{45'700, 45}, Step{119'999, 119}}) {
    SCOPED_TRACE(step.ms);
    auto hit = cache.lookup(q, at_ms(step.ms), out);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->remaining_ttl, 120 - step.age);
    EXPECT_EQ(hit->addresses[0].ttl, 300 - step.age);
    Pkt p = parse(out);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(ttls(ldns_pkt_answer(p.get())), (std::vector<std::uint32_t>{120 - step.age, 300 - step.age}));
    EXPECT_EQ(ttls(ldns_pkt_authority(p.get())), (std::vector<std::uint32_t>{3600 - step.age}));
    EXPECT_TRUE(ldns_pkt_edns_do(p.get()));
    EXPECT_EQ(ldns_pkt_edns_udp_size(p.get()), 1232);
  }
}

TEST(ResponseCache, LiveRecordNeverReachesZero) {
  // A record shorter than the answer's cache_ttl (the filter never makes one,
  // but the cache must not count below 1 for a live answer).
  AnswerSpec s;
  s.question = "example.com. IN A";
  s.answer = {"example.com. 10 IN A 93.184.216.34", "example.com. 0 IN TXT \"zero\""};
  ResponseCache cache(16, 1 << 16);
  cache.insert(make_query("example.com", 1), filtered(build_answer(s), 60), at(0));
  Bytes out;
  ASSERT_TRUE(cache.lookup(make_query("example.com", 1), at(30), out).has_value());
  Pkt p = parse(out);
  ASSERT_NE(p, nullptr);
  // 10 stops at 1; 0 (do not cache) stays 0.
  EXPECT_EQ(ttls(ldns_pkt_answer(p.get())), (std::vector<std::uint32_t>{1, 0}));
}

TEST(ResponseCache, ExpiredIsNotServedAndCounted) {
  ResponseCache cache(16, 1 << 16);
  cache.insert(make_query("www.example.com", 1, rr_type::A, true), www_answer(), at(0));
  Bytes out = {1, 2, 3};
  EXPECT_FALSE(cache.lookup(make_query("www.example.com", 2, rr_type::A, true), at(120), out).has_value());
  EXPECT_EQ(out, (Bytes{1, 2, 3}));  // untouched
  EXPECT_EQ(cache.counters().expired, 1u);
  EXPECT_EQ(cache.counters().misses, 1u);
  EXPECT_EQ(cache.counters().hits, 0u);
  // The expired entry is gone, and its bytes with it.
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(cache.lookup(make_query("www.example.com", 2, rr_type::A, true), at(121), out).has_value());
  EXPECT_EQ(cache.counters().expired, 1u);
  EXPECT_EQ(cache.counters().misses, 2u);
}

TEST(ResponseCache, KeyIsNameTypeClassAndDo) {
  ResponseCache cache(16, 1 << 16);
  cache.insert(make_query("www.example.com", 1, rr_type::A, true), www_answer(), at(0));
  Bytes out = {7};
  // DO clear: a miss (the cached answer may carry RRSIGs this guest did not ask for).
  EXPECT_FALSE(cache.lookup(make_query("www.example.com", 1, rr_type::A, false), at(1), out).has_value());
  EXPECT_FALSE(cache.lookup(make_query("www.example.com", 1, rr_type::AAAA, true), at(1), out).has_value());
  Query chaos = make_query("www.example.com", 1, rr_type::A, true);
  chaos.qclass = 3;
  EXPECT_FALSE(cache.lookup(chaos, at(1), out).has_value());
  EXPECT_FALSE(cache.lookup(make_query("ww.example.com", 1, rr_type::A, true), at(1), out).has_value());
  EXPECT_FALSE(cache.lookup(make_query("www.example.co", 1, rr_type::A, true), at(1), out).has_value());
  EXPECT_EQ(out, (Bytes{7}));
  EXPECT_EQ(cache.counters().misses, 5u);
  EXPECT_EQ(cache.counters().hits, 0u);
  EXPECT_TRUE(cache.lookup(make_query("WWW.EXAMPLE.COM", 1, rr_type::A, true), at(1), out).has_value());
}

TEST(ResponseCache, LruEvictionByCount) {
  ResponseCache cache(2, 1 << 16);
  cache.insert(make_query("a.example.com", 1), answer_for("a.example.com"), at(0));
  cache.insert(make_query("b.example.com", 1), answer_for("b.example.com"), at(0));
  Bytes out;
  // Touch a: b becomes the least recently used.
  ASSERT_TRUE(cache.lookup(make_query("a.example.com", 1), at(1), out).has_value());
  cache.insert(make_query("c.example.com", 1), answer_for("c.example.com"), at(2));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.counters().evicted, 1u);
  EXPECT_TRUE(cache.lookup(make_query("a.example.com", 1), at(3), out).has_value());
  EXPECT_FALSE(cache.lookup(make_query("b.example.com", 1), at(3), out).has_value());
  EXPECT_TRUE(cache.lookup(make_query("c.example.com", 1), at(3), out).has_value());
}

TEST(ResponseCache, LruEvictionByBytes) {
  const FilteredAnswer a = answer_for("a.example.com", 200);
  const FilteredAnswer b = answer_for("b.example.com", 200);
  const FilteredAnswer c = answer_for("c.example.com", 200);
  const FilteredAnswer d = answer_for("d.example.com", 500);
  ASSERT_EQ(a.wire.size(), b.wire.size());
  // Room for two of a, b, c, not three.
  const std::size_t max_bytes = a.wire.size() * 2 + a.wire.size() / 2;
  ResponseCache cache(100, max_bytes);
  cache.insert(make_query("a.example.com", 1), a, at(0));
  cache.insert(make_query("b.example.com", 1), b, at(0));
  EXPECT_EQ(cache.bytes(), a.wire.size() + b.wire.size());
  cache.insert(make_query("c.example.com", 1), c, at(0));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), b.wire.size() + c.wire.size());
  EXPECT_EQ(cache.counters().evicted, 1u);
  Bytes out;
  EXPECT_FALSE(cache.lookup(make_query("a.example.com", 1), at(1), out).has_value());
  EXPECT_TRUE(cache.lookup(make_query("b.example.com", 1), at(1), out).has_value());

  // One large answer pushes out both of the others.
  ASSERT_LE(d.wire.size(), max_bytes);
  ASSERT_GT(d.wire.size(), max_bytes - c.wire.size());
  cache.insert(make_query("d.example.com", 1), d, at(2));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), d.wire.size());
  EXPECT_EQ(cache.counters().evicted, 3u);
}

TEST(ResponseCache, ReinsertReplaces) {
  ResponseCache cache(16, 1 << 16);
  cache.insert(make_query("a.example.com", 1), answer_for("a.example.com"), at(0));
  const FilteredAnswer bigger = answer_for("a.example.com", 100);
  cache.insert(make_query("A.example.com", 1), bigger, at(10));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), bigger.wire.size());
  EXPECT_EQ(cache.counters().evicted, 0u);
  Bytes out;
  auto hit = cache.lookup(make_query("a.example.com", 1), at(10), out);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->remaining_ttl, 60u);  // aged from the second insert
  EXPECT_EQ(out.size(), bigger.wire.size());
}

TEST(ResponseCache, StoredWithIdZero) {
  ResponseCache cache(16, 1 << 16);
  FilteredAnswer answer = answer_for("a.example.com");
  answer.wire[0] = 0x12;
  answer.wire[1] = 0x34;
  cache.insert(make_query("a.example.com", 0x5678), answer, at(0));
  Bytes out;
  ASSERT_TRUE(cache.lookup(make_query("a.example.com", 0x9ABC), at(0), out).has_value());
  EXPECT_EQ(out[0], 0x9A);
  EXPECT_EQ(out[1], 0xBC);
}

TEST(ResponseCache, CacheTtlZeroIsNotStored) {
  ResponseCache cache(16, 1 << 16);
  FilteredAnswer answer = answer_for("a.example.com");
  answer.cache_ttl = 0;
  cache.insert(make_query("a.example.com", 1), answer, at(0));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(ResponseCache, LargerThanMaxBytesIsNotStored) {
  const FilteredAnswer small = answer_for("a.example.com");
  const FilteredAnswer large = answer_for("b.example.com", 300);
  ResponseCache cache(16, large.wire.size() - 1);
  cache.insert(make_query("a.example.com", 1), small, at(0));
  cache.insert(make_query("b.example.com", 1), large, at(0));
  EXPECT_EQ(cache.size(), 1u);  // and it did not push out what was there
  EXPECT_EQ(cache.bytes(), small.wire.size());
  EXPECT_EQ(cache.counters().evicted, 0u);
}

TEST(ResponseCache, UnusableAnswersAreNotStored) {
  ResponseCache cache(16, 1 << 16);
  // Truncated: a retry over TCP is due, not reuse.
  FilteredAnswer tc = answer_for("a.example.com");
  tc.truncated = true;
  cache.insert(make_query("a.example.com", 1), tc, at(0));
  // An answer to another question.
  cache.insert(make_query("b.example.com", 1), answer_for("a.example.com"), at(0));
  cache.insert(make_query("a.example.com", 1, rr_type::AAAA), answer_for("a.example.com"), at(0));
  // Bytes whose records do not walk.
  FilteredAnswer cut = answer_for("c.example.com");
  cut.wire.resize(cut.wire.size() - 3);
  cache.insert(make_query("c.example.com", 1), cut, at(0));
  // Shorter than a header.
  cache.insert(make_query("d.example.com", 1), filtered(Bytes{0, 0, 0x81, 0x80}, 60), at(0));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(ResponseCache, ZeroEntriesStoresNothing) {
  ResponseCache cache(0, 1 << 16);
  cache.insert(make_query("a.example.com", 1), answer_for("a.example.com"), at(0));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(ResponseCache, RootAndLongestName) {
  ResponseCache cache(16, 1 << 16);
  // The root: a one-byte name.
  AnswerSpec root;
  root.question = ". IN NS";
  root.answer = {". 500 IN NS a.root-servers.net."};
  Query q = make_query("", 1, rr_type::NS);
  cache.insert(q, filtered(build_answer(root), 500), at(0));
  // A 253-character name (255 bytes of wire).
  std::string label(63, 'a');
  std::string longest = label + "." + label + "." + label + "." + std::string(61, 'b');
  AnswerSpec big;
  big.question = longest + ". IN A";
  big.answer = {longest + ". 60 IN A 93.184.216.34"};
  Query ql = make_query(longest, 1);
  ASSERT_EQ(ql.qname_wire_len, 255);
  cache.insert(ql, filtered(build_answer(big), 60), at(0));
  EXPECT_EQ(cache.size(), 2u);
  Bytes out;
  EXPECT_TRUE(cache.lookup(make_query("", 2, rr_type::NS), at(1), out).has_value());
  std::string upper = longest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(cache.lookup(make_query(upper, 3), at(1), out).has_value());
  Pkt p = parse(out);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(owner_of_question(p.get()), upper + ".");
}

}  // namespace
}  // namespace abox::dns
