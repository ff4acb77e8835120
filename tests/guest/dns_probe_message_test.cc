// The self-test's DNS: the query is what a resolver expects (ldns, an
// independent decoder, reads it back), and the answer parser finds the A
// records of real answers and refuses the nasty ones: every truncation,
// compression loops and forward pointers, names too long, records that lie
// about their length, someone else's reply.
#include "guest/box_guest/dns_probe_message.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/big_endian.h"
#include "tests/support/ldns.h"

namespace abox::guest {
namespace {

using abox::testing::put16;
using abox::testing::put32;

constexpr std::uint16_t kId = 0xBEEF;
constexpr const char* kName = "secret.example.test";

std::vector<std::uint8_t> wire_name(std::string_view dotted) {
  std::vector<std::uint8_t> out;
  std::size_t at = 0;
  while (at < dotted.size()) {
    auto dot = dotted.find('.', at);
    if (dot == std::string_view::npos) dot = dotted.size();
    out.push_back(static_cast<std::uint8_t>(dot - at));
    out.insert(out.end(), dotted.begin() + static_cast<std::ptrdiff_t>(at),
               dotted.begin() + static_cast<std::ptrdiff_t>(dot));
    at = dot + 1;
  }
  out.push_back(0);
  return out;
}

// A response by hand: header, the question, then the answer records given as raw bytes.
struct Answer {
  std::uint16_t id = kId;
  std::uint16_t flags = 0x8180;  // QR RD RA, NOERROR
  std::uint16_t qdcount = 1;
  std::uint16_t ancount = 0;
  std::vector<std::uint8_t> question = question_for(kName);
  std::vector<std::uint8_t> records;

  static std::vector<std::uint8_t> question_for(std::string_view name, std::uint16_t type = 1) {
    auto q = wire_name(name);
    put16(q, type);
    put16(q, 1);
    return q;
  }
  // A record: owner as raw bytes (a name or a pointer), type, class, TTL, data.
  Answer& record(std::vector<std::uint8_t> owner, std::uint16_t type, std::vector<std::uint8_t> data,
                 std::uint16_t klass = 1) {
    records.insert(records.end(), owner.begin(), owner.end());
    put16(records, type);
    put16(records, klass);
    put32(records, 300);
    put16(records, static_cast<std::uint16_t>(data.size()));
    records.insert(records.end(), data.begin(), data.end());
    ++ancount;
    return *this;
  }
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b;
    put16(b, id);
    put16(b, flags);
    put16(b, qdcount);
    put16(b, ancount);
    put32(b, 0);
    b.insert(b.end(), question.begin(), question.end());
    b.insert(b.end(), records.begin(), records.end());
    return b;
  }
};

const std::vector<std::uint8_t> kPointerToQuestion = {0xC0, 12};

base::Result<DnsAnswerSummary, DnsAnswerError> parse(const Answer& a) {
  return parse_a_answer(a.bytes(), kId, kName);
}
DnsAnswerError error_of(const std::vector<std::uint8_t>& bytes) {
  auto r = parse_a_answer(bytes, kId, kName);
  EXPECT_FALSE(r.ok());
  return r.ok() ? DnsAnswerError::kShortHeader : r.error();
}

TEST(DnsProbeMessage, QueryIsWhatAResolverReads) {
  std::vector<std::uint8_t> q;
  ASSERT_TRUE(build_a_query("Secret.Example.test.", 0x1234, q));
  ldns_pkt* pkt = nullptr;
  ASSERT_EQ(ldns_wire2pkt(&pkt, q.data(), q.size()), LDNS_STATUS_OK) << "ldns cannot read the query";
  EXPECT_EQ(ldns_pkt_id(pkt), 0x1234);
  EXPECT_FALSE(ldns_pkt_qr(pkt));
  EXPECT_TRUE(ldns_pkt_rd(pkt));
  EXPECT_EQ(ldns_pkt_get_opcode(pkt), LDNS_PACKET_QUERY);
  ldns_rr_list* questions = ldns_pkt_question(pkt);
  ASSERT_EQ(ldns_rr_list_rr_count(questions), 1u);
  ldns_rr* question = ldns_rr_list_rr(questions, 0);
  char* owner = ldns_rdf2str(ldns_rr_owner(question));
  EXPECT_STREQ(owner, "Secret.Example.test.");
  free(owner);
  EXPECT_EQ(ldns_rr_get_type(question), LDNS_RR_TYPE_A);
  EXPECT_EQ(ldns_rr_get_class(question), LDNS_RR_CLASS_IN);
  EXPECT_EQ(ldns_pkt_ancount(pkt), 0);
  ldns_pkt_free(pkt);
}

TEST(DnsProbeMessage, QueryRefusesWhatIsNotAHostName) {
  std::vector<std::uint8_t> q;
  for (std::string_view bad : std::initializer_list<std::string_view>{
           "", ".", "a..b", "a b.test", "a\\.b", "x.test\n", std::string_view("a\0b", 3)})
    EXPECT_FALSE(build_a_query(bad, 1, q)) << bad;
  EXPECT_FALSE(build_a_query(std::string(64, 'a') + ".test", 1, q)) << "a label of 64";
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefghi.";
  EXPECT_FALSE(build_a_query(long_name + "x", 1, q)) << "over 253";
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(build_a_query(std::string(63, 'a') + ".under_score-1.test", 1, q));
}

TEST(DnsProbeMessage, RefusedNxdomainAndNodataHaveNoA) {
  for (std::uint16_t rcode : {0, 3, 5, 2}) {
    Answer a;
    a.flags = static_cast<std::uint16_t>(0x8180 | rcode);
    auto r = parse(a);
    ASSERT_TRUE(r.ok()) << dns_answer_error_name(r.error());
    EXPECT_EQ(r->rcode, rcode);
    EXPECT_EQ(r->a_count, 0u);
  }
  EXPECT_EQ(dns_rcode_name(5), "REFUSED");
  EXPECT_EQ(dns_rcode_name(3), "NXDOMAIN");
}

TEST(DnsProbeMessage, ARecordsAreFoundBehindCnamesAndPointers) {
  Answer a;
  auto target = wire_name("cdn.example.net");
  a.record(kPointerToQuestion, 5, target);  // CNAME, owner by pointer
  a.record(wire_name("cdn.example.net"), 1, {93, 184, 215, 18});
  a.record({0xC0, static_cast<std::uint8_t>(12 + a.question.size() + 12)}, 1,
           {93, 184, 215, 19});                                        // -> the CNAME's data
  a.record(kPointerToQuestion, 28, std::vector<std::uint8_t>(16, 1));  // AAAA: not counted
  a.record(kPointerToQuestion, 1, {1, 2, 3, 4}, 3);                    // class CHAOS: not counted
  auto r = parse(a);
  ASSERT_TRUE(r.ok()) << dns_answer_error_name(r.error());
  EXPECT_EQ(r->answer_count, 5);
  EXPECT_EQ(r->a_count, 2u);
  EXPECT_EQ(r->a[0], 0x5DB8'D712u);
  EXPECT_EQ(r->a[1], 0x5DB8'D713u);
}

TEST(DnsProbeMessage, QuestionIsComparedWithoutCaseAndMustMatch) {
  Answer upper;
  upper.question = Answer::question_for("SECRET.example.TEST");
  EXPECT_TRUE(parse(upper).ok());
  Answer other;
  other.question = Answer::question_for("other.example.test");
  EXPECT_EQ(error_of(other.bytes()), DnsAnswerError::kQuestionMismatch);
  Answer aaaa;
  aaaa.question = Answer::question_for(kName, 28);
  EXPECT_EQ(error_of(aaaa.bytes()), DnsAnswerError::kQuestionMismatch);
  EXPECT_TRUE(dns_answer_is_someone_elses(DnsAnswerError::kQuestionMismatch));
}

TEST(DnsProbeMessage, HeaderNastyCases) {
  Answer other_id;
  other_id.id = kId ^ 1;
  EXPECT_EQ(error_of(other_id.bytes()), DnsAnswerError::kOtherId);
  Answer query;
  query.flags = 0x0100;
  EXPECT_EQ(error_of(query.bytes()), DnsAnswerError::kNotResponse);
  Answer notify;
  notify.flags = 0x8000 | (4 << 11);
  EXPECT_EQ(error_of(notify.bytes()), DnsAnswerError::kNotQuery);
  Answer two;
  two.qdcount = 2;
  EXPECT_EQ(error_of(two.bytes()), DnsAnswerError::kQuestionCount);
  for (auto e : {DnsAnswerError::kOtherId, DnsAnswerError::kNotResponse})
    EXPECT_TRUE(dns_answer_is_someone_elses(e));
  EXPECT_FALSE(dns_answer_is_someone_elses(DnsAnswerError::kBadName));
}

TEST(DnsProbeMessage, NoQuestionOnlyForAnErrorWithoutAnswers) {
  Answer refused;
  refused.flags = 0x8185;
  refused.qdcount = 0;
  refused.question.clear();
  auto r = parse(refused);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rcode, 5);
  Answer noerror = refused;
  noerror.flags = 0x8180;
  EXPECT_EQ(error_of(noerror.bytes()), DnsAnswerError::kQuestionCount);
}

TEST(DnsProbeMessage, TruncatedFlagIsReported) {
  Answer tc;
  tc.flags = 0x8380;
  auto r = parse(tc);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->truncated);
}

TEST(DnsProbeMessage, EveryTruncationIsRefused) {
  Answer a;
  a.record(kPointerToQuestion, 1, {93, 184, 215, 18});
  auto full = a.bytes();
  for (std::size_t cut = 0; cut < full.size(); ++cut)
    EXPECT_FALSE(parse_a_answer(std::span(full).first(cut), kId, kName).ok()) << "cut at " << cut;
}

TEST(DnsProbeMessage, NameNastyCases) {
  auto with_owner = [](std::vector<std::uint8_t> owner) {
    Answer a;
    a.record(std::move(owner), 1, {1, 2, 3, 4});
    return error_of(a.bytes());
  };
  const auto answer_at = static_cast<std::uint8_t>(12 + Answer::question_for(kName).size());
  EXPECT_EQ(with_owner({0xC0, answer_at}), DnsAnswerError::kBadName) << "a pointer to itself";
  EXPECT_EQ(with_owner({0xC0, 200}), DnsAnswerError::kBadName) << "a pointer forward";
  EXPECT_EQ(with_owner({0x40, 1, 'a', 0}), DnsAnswerError::kBadName) << "label type 0x40";
  EXPECT_EQ(with_owner({0x80, 1, 'a', 0}), DnsAnswerError::kBadName) << "label type 0x80";
  std::vector<std::uint8_t> long_owner;
  for (int i = 0; i < 5; ++i) {
    long_owner.push_back(63);
    long_owner.insert(long_owner.end(), 63, 'x');
  }
  long_owner.push_back(0);
  EXPECT_EQ(with_owner(long_owner), DnsAnswerError::kBadName) << "over 255 bytes";

  // Two pointers that point at each other's labels: backwards each time, yet a loop.
  Answer loop;
  // "a" then a pointer back to that "a": every pointer points backwards, and still a loop.
  loop.record({1, 'a', 0xC0, answer_at}, 1, {1, 2, 3, 4});
  EXPECT_EQ(error_of(loop.bytes()), DnsAnswerError::kBadName);
}

TEST(DnsProbeMessage, RecordNastyCases) {
  Answer long_rdata;
  long_rdata.record(kPointerToQuestion, 1, {1, 2, 3, 4});
  auto b = long_rdata.bytes();
  b[b.size() - 5] = 9;  // rdlength past the end
  EXPECT_EQ(error_of(b), DnsAnswerError::kRecordPastEnd);
  Answer five;
  five.record(kPointerToQuestion, 1, {1, 2, 3, 4, 5});
  EXPECT_EQ(error_of(five.bytes()), DnsAnswerError::kBadARecord);
  Answer more;
  more.record(kPointerToQuestion, 1, {1, 2, 3, 4});
  more.ancount = 2;  // says two, has one
  EXPECT_FALSE(parse(more).ok());
}

}  // namespace
}  // namespace abox::guest
