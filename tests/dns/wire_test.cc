// Tests for dns/wire: every message is built by hand, byte by byte, so each
// test states exactly which shape it feeds the parser. A few well-formed
// messages are also checked against ldns, the library the rest of the gate
// uses, so that our reading and theirs agree.

#include "dns/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/support/big_endian.h"
#include "tests/support/ldns.h"

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kId = 0xBEEF;
constexpr std::uint16_t kRD = 0x0100;
constexpr std::uint16_t kQR = 0x8000;
constexpr std::uint16_t kTC = 0x0200;
constexpr std::uint16_t kRA = 0x0080;
constexpr std::uint16_t kAA = 0x0400;
constexpr std::uint16_t kAD = 0x0020;
constexpr std::uint16_t kCD = 0x0010;
constexpr std::uint16_t kZ = 0x0040;
constexpr std::uint32_t kDO = 0x8000;

// ---- building messages ----------------------------------------------------

using abox::testing::get16;
using abox::testing::get32;
using abox::testing::put16;
using abox::testing::put32;

Bytes header(std::uint16_t flags, std::uint16_t qd, std::uint16_t an, std::uint16_t ns, std::uint16_t ar,
             std::uint16_t id = kId) {
  Bytes b;
  put16(b, id);
  put16(b, flags);
  put16(b, qd);
  put16(b, an);
  put16(b, ns);
  put16(b, ar);
  return b;
}

// One label with arbitrary bytes (dots and NULs included), no root.
void put_label(Bytes& b, std::string_view label) {
  b.push_back(static_cast<std::uint8_t>(label.size()));
  b.insert(b.end(), label.begin(), label.end());
}
// Labels as given, then the root label.
Bytes wire_name(std::initializer_list<std::string_view> labels) {
  Bytes b;
  for (auto l : labels) put_label(b, l);
  b.push_back(0);
  return b;
}
// A dotted name ("www.example.com", "" for the root) in wire form.
Bytes wire_name(std::string_view dotted) {
  Bytes b;
  while (!dotted.empty()) {
    auto dot = dotted.find('.');
    put_label(b, dotted.substr(0, dot));
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  b.push_back(0);
  return b;
}
void append(Bytes& b, const Bytes& more) {
  b.insert(b.end(), more.begin(), more.end());
}

// An OPT record, set up by chaining: Opt().size(512).with_do().
struct Opt {
  std::uint16_t udp_size = 1232;
  bool dnssec_ok = false;
  std::uint8_t version = 0;
  Bytes options;  // raw option bytes (code, length, data)...

  Opt& size(std::uint16_t v) {
    udp_size = v;
    return *this;
  }
  Opt& with_do() {
    dnssec_ok = true;
    return *this;
  }
  Opt& ver(std::uint8_t v) {
    version = v;
    return *this;
  }
  Opt& opts(Bytes v) {
    options = std::move(v);
    return *this;
  }
};
void put_opt(Bytes& b, const Opt& opt) {
  b.push_back(0);
  put16(b, rr_type::OPT);
  put16(b, opt.udp_size);
  put32(b, (std::uint32_t{opt.version} << 16) | (opt.dnssec_ok ? kDO : 0));
  put16(b, static_cast<std::uint16_t>(opt.options.size()));
  append(b, opt.options);
}

// A query for `name` (wire form), with an OPT when `opt` is given.
Bytes query(const Bytes& name, std::uint16_t qtype = rr_type::A, const std::optional<Opt>& opt = std::nullopt,
            std::uint16_t flags = kRD) {
  Bytes b = header(flags, 1, 0, 0, opt ? 1 : 0);
  append(b, name);
  put16(b, qtype);
  put16(b, kClassIN);
  if (opt) put_opt(b, *opt);
  return b;
}
Bytes query(std::string_view dotted, std::uint16_t qtype = rr_type::A,
            const std::optional<Opt>& opt = std::nullopt, std::uint16_t flags = kRD) {
  return query(wire_name(dotted), qtype, opt, flags);
}

Query parsed(const Bytes& msg) {
  auto r = parse_query(msg);
  EXPECT_TRUE(r.ok()) << "refused: " << (r.ok() ? "" : describe(r.error()));
  return r.ok() ? *r : Query{};
}
QueryError error_of(const Bytes& msg) {
  auto r = parse_query(msg);
  EXPECT_FALSE(r.ok()) << "accepted";
  return r.ok() ? QueryError{} : r.error();
}

// n labels of `length` bytes of 'a', joined; the last label shortened or
// lengthened so the presentation form is exactly `total` bytes.
std::string name_of_length(std::size_t total) {
  std::string out;
  while (out.size() < total) {
    if (!out.empty()) out += '.';
    std::size_t room = total - out.size();
    out.append(std::min<std::size_t>(63, room), 'a');
  }
  return out;
}

// ---- parse_query: well-formed queries ---------------------------------------

TEST(ParseQuery, PlainAQuery) {
  Query q = parsed(query("example.com"));
  EXPECT_EQ(q.id, kId);
  EXPECT_EQ(q.flags, kRD);
  EXPECT_EQ(q.opcode, 0);
  EXPECT_TRUE(q.recursion_desired);
  EXPECT_FALSE(q.checking_disabled);
  EXPECT_EQ(q.qtype, rr_type::A);
  EXPECT_EQ(q.qclass, kClassIN);
  EXPECT_EQ(Bytes(q.qname().begin(), q.qname().end()), wire_name("example.com"));
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), "example.com");
  EXPECT_FALSE(q.has_edns);
  EXPECT_EQ(q.edns_udp_size, 0);
  EXPECT_FALSE(q.dnssec_ok);
  EXPECT_EQ(q.udp_limit(), kPlainUdpSize);
}

TEST(ParseQuery, AQueryWithEdns) {
  Query q = parsed(query("example.com", rr_type::AAAA, Opt().size(1232).with_do()));
  EXPECT_EQ(q.qtype, rr_type::AAAA);
  EXPECT_TRUE(q.has_edns);
  EXPECT_EQ(q.edns_udp_size, 1232);
  EXPECT_TRUE(q.dnssec_ok);
  EXPECT_EQ(q.edns_version, 0);
  EXPECT_EQ(q.udp_limit(), 1232);
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), "example.com");
}

TEST(ParseQuery, EdnsVersionAndOptionsAreRead) {
  Bytes cookie = {0x00, 0x0A, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8};  // COOKIE, 8-byte client cookie
  Bytes empty_option = {0x00, 0x0C, 0x00, 0x00};                    // PADDING, no bytes
  Opt opt = Opt().size(4096).ver(1).opts(cookie);
  append(opt.options, empty_option);
  Query q = parsed(query("example.com", rr_type::A, opt));
  EXPECT_TRUE(q.has_edns);
  EXPECT_EQ(q.edns_version, 1);
  EXPECT_FALSE(q.dnssec_ok);
}

TEST(ParseQuery, UdpLimitIsClamped) {
  EXPECT_EQ(parsed(query("a.com", rr_type::A, Opt().size(0))).udp_limit(), 512);
  EXPECT_EQ(parsed(query("a.com", rr_type::A, Opt().size(100))).udp_limit(), 512);
  EXPECT_EQ(parsed(query("a.com", rr_type::A, Opt().size(512))).udp_limit(), 512);
  EXPECT_EQ(parsed(query("a.com", rr_type::A, Opt().size(4096))).udp_limit(), 4096);
  EXPECT_EQ(parsed(query("a.com", rr_type::A, Opt().size(65535))).udp_limit(), 4096);
}

TEST(ParseQuery, MixedCaseIsKeptOnTheWireAndFoldedInTheName) {
  Query q = parsed(query("WwW.ExAmPlE.CoM"));
  EXPECT_EQ(Bytes(q.qname().begin(), q.qname().end()), wire_name("WwW.ExAmPlE.CoM"));
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), "www.example.com");
}

TEST(ParseQuery, FlagsAndOpcodeAreKeptAsReceived) {
  const std::uint16_t flags = (2 << 11) | kAA | kTC | kZ | kAD | kCD;  // opcode STATUS, RD clear
  Query q = parsed(query("example.com", rr_type::A, std::nullopt, flags));
  EXPECT_EQ(q.flags, flags);
  EXPECT_EQ(q.opcode, 2);
  EXPECT_FALSE(q.recursion_desired);
  EXPECT_TRUE(q.checking_disabled);
}

TEST(ParseQuery, UnderscoreAndHyphenAreCanonical) {
  Query q = parsed(query("_443._tcp.my-host.example", rr_type::SRV));
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), "_443._tcp.my-host.example");
}

// ---- parse_query: header and sections -------------------------------------

TEST(ParseQuery, TooShort) {
  Bytes full = query("example.com");
  EXPECT_EQ(error_of({}), QueryError::too_short);
  EXPECT_EQ(error_of(Bytes(full.begin(), full.begin() + 11)), QueryError::too_short);
  // Every cut inside the question runs past the end.
  for (std::size_t n = kHeaderSize; n < full.size(); ++n) {
    EXPECT_EQ(error_of(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n))),
              QueryError::too_short)
        << "cut at " << n;
  }
}

TEST(ParseQuery, TrailingBytes) {
  Bytes msg = query("example.com");
  msg.push_back(0);
  EXPECT_EQ(error_of(msg), QueryError::trailing_bytes);
  Bytes with_opt = query("example.com", rr_type::A, Opt());
  append(with_opt, {0xDE, 0xAD});
  EXPECT_EQ(error_of(with_opt), QueryError::trailing_bytes);
}

TEST(ParseQuery, ResponseIsNotAQuery) {
  EXPECT_EQ(error_of(query("example.com", rr_type::A, std::nullopt, kQR | kRD)), QueryError::not_a_query);
}

TEST(ParseQuery, QuestionCountMustBeOne) {
  Bytes none = header(kRD, 0, 0, 0, 0);
  EXPECT_EQ(error_of(none), QueryError::question_count);

  Bytes two = header(kRD, 2, 0, 0, 0);
  for (int i = 0; i < 2; ++i) {
    append(two, wire_name("example.com"));
    put16(two, rr_type::A);
    put16(two, kClassIN);
  }
  EXPECT_EQ(error_of(two), QueryError::question_count);
}

TEST(ParseQuery, AnswerAuthorityOrSecondAdditionalIsRefused) {
  auto with_counts = [](std::uint16_t an, std::uint16_t ns, std::uint16_t ar) {
    Bytes b = header(kRD, 1, an, ns, ar);
    append(b, wire_name("example.com"));
    put16(b, rr_type::A);
    put16(b, kClassIN);
    for (int i = 0; i < an + ns + ar; ++i) put_opt(b, Opt());
    return b;
  };
  EXPECT_EQ(error_of(with_counts(1, 0, 0)), QueryError::unexpected_records);
  EXPECT_EQ(error_of(with_counts(0, 1, 0)), QueryError::unexpected_records);
  EXPECT_EQ(error_of(with_counts(0, 0, 2)), QueryError::unexpected_records);
}

TEST(ParseQuery, OptMustBeOwnedByRoot) {
  Bytes b = header(kRD, 1, 0, 0, 1);
  append(b, wire_name("example.com"));
  put16(b, rr_type::A);
  put16(b, kClassIN);
  append(b, wire_name("example.com"));  // owner: not "."
  put16(b, rr_type::OPT);
  put16(b, 1232);
  put32(b, 0);
  put16(b, 0);
  EXPECT_EQ(error_of(b), QueryError::bad_additional);
}

TEST(ParseQuery, OptOwnerMayNotBeCompressed) {
  Bytes b = query("example.com", rr_type::A, Opt());
  // Replace the root owner byte with a pointer to the question name.
  const std::size_t owner = kHeaderSize + wire_name("example.com").size() + 4;
  b[owner] = 0xC0;
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(owner) + 1, 0x0C);
  EXPECT_EQ(error_of(b), QueryError::bad_additional);
}

TEST(ParseQuery, AdditionalThatIsNotOptIsRefused) {
  Bytes b = header(kRD, 1, 0, 0, 1);
  append(b, wire_name("example.com"));
  put16(b, rr_type::A);
  put16(b, kClassIN);
  b.push_back(0);
  put16(b, rr_type::A);
  put16(b, kClassIN);
  put32(b, 300);
  put16(b, 4);
  put32(b, 0x7F000001);
  EXPECT_EQ(error_of(b), QueryError::bad_additional);
}

TEST(ParseQuery, OptRdlengthPastTheEnd) {
  Bytes b = query("example.com", rr_type::A, Opt().opts({0x00, 0x0A, 0x00, 0x02, 1, 2}));
  b.pop_back();  // RDLENGTH says 6, 5 remain
  EXPECT_EQ(error_of(b), QueryError::too_short);

  Bytes cut = query("example.com", rr_type::A, Opt());
  cut.resize(cut.size() - 3);  // the OPT's fixed part itself is cut
  EXPECT_EQ(error_of(cut), QueryError::too_short);
}

TEST(ParseQuery, OptOptionsMustFillRdataExactly) {
  // An option whose length runs past RDLENGTH (but not past the message).
  Bytes overrun = query("example.com", rr_type::A, Opt().opts({0x00, 0x0A, 0x00, 0x09, 1, 2, 3, 4}));
  EXPECT_EQ(error_of(overrun), QueryError::bad_additional);
  // Two stray bytes: not even an option header.
  Bytes stray = query("example.com", rr_type::A, Opt().opts({0x00, 0x0A}));
  EXPECT_EQ(error_of(stray), QueryError::bad_additional);
}

// ---- parse_query: names ---------------------------------------------------

TEST(ParseQuery, LabelOf63IsFineAnd64IsNot) {
  const std::string l63(63, 'x');
  Query q = parsed(query(l63 + ".com"));
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), l63 + ".com");

  EXPECT_EQ(error_of(query(wire_name({std::string(64, 'x'), "com"}))), QueryError::bad_name);
}

TEST(ParseQuery, NameOf253IsFineAnd254IsNot) {
  const std::string n253 = name_of_length(253);
  ASSERT_EQ(n253.size(), 253U);
  Query q = parsed(query(n253));
  EXPECT_EQ(q.qname_wire_len, 255);
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), n253);

  const std::string n254 = name_of_length(254);
  ASSERT_EQ(n254.size(), 254U);
  EXPECT_EQ(error_of(query(n254)), QueryError::bad_name);

  // Many short labels reach the limit the same way: 127 labels of 1 byte
  // are 253 bytes of text, 128 are 255.
  std::string short_labels;
  for (int i = 0; i < 127; ++i) short_labels += i == 0 ? "a" : ".a";
  EXPECT_TRUE(parse_query(query(short_labels)).ok());
  EXPECT_EQ(error_of(query(short_labels + ".a")), QueryError::bad_name);
}

TEST(ParseQuery, PointerToItselfIsALoop) {
  Bytes name = {0xC0, 0x0C};  // at offset 12, pointing at 12
  EXPECT_EQ(error_of(query(name)), QueryError::compression_loop);
  // After a label, back to the start of the same name: a.a.a.a...
  Bytes after_label = {0x01, 'a', 0xC0, 0x0C};
  EXPECT_EQ(error_of(query(after_label)), QueryError::compression_loop);
}

TEST(ParseQuery, PointerForwardIsRefused) {
  // Points at the "example" label further on (offset 12 + 2).
  Bytes name = {0xC0, 0x0E};
  append(name, wire_name("example.com"));
  EXPECT_EQ(error_of(query(name)), QueryError::compression_loop);
  Bytes far = {0xFF, 0xFF};  // offset 16383
  EXPECT_EQ(error_of(query(far)), QueryError::compression_loop);
}

TEST(ParseQuery, PointerIntoTheHeaderIsRefused) {
  for (std::uint8_t target : {0, 2, 4, 11}) {
    Bytes name = {0x01, 'a', 0xC0, target};
    EXPECT_EQ(error_of(query(name)), QueryError::compression_loop) << "target " << int{target};
  }
}

TEST(ParseQuery, SeventeenChainedPointersAreRefused) {
  // In a query the question starts right after the header, so no pointer in
  // it can point backwards without landing in the header: the first of the
  // chain already fails. The 16/17 boundary is tested on responses below
  // (FindTtlOffsets.SixteenPointersButNotSeventeen).
  Bytes name;
  for (std::size_t i = 0; i < 17; ++i)
    append(name, {0xC0, static_cast<std::uint8_t>(kHeaderSize + 2 * (i + 1))});
  append(name, wire_name("example.com"));
  EXPECT_EQ(error_of(query(name)), QueryError::compression_loop);
}

TEST(ParseQuery, ReservedLabelTypesAreBadNames) {
  EXPECT_EQ(error_of(query(Bytes{0x41, 'a', 0})), QueryError::bad_name);  // 0x40: extended label
  EXPECT_EQ(error_of(query(Bytes{0x81, 'a', 0})), QueryError::bad_name);  // 0x80: reserved
  Bytes after_label = {0x01, 'a', 0x40, 0x00};
  EXPECT_EQ(error_of(query(after_label)), QueryError::bad_name);
}

TEST(ParseQuery, DotInsideALabelHasNoCanonicalForm) {
  // One label "a.b", not the labels "a" and "b": it must not become "a.b".
  Query q = parsed(query(wire_name({"a.b", "com"})));
  EXPECT_FALSE(q.canonical_ok);
  EXPECT_EQ(Bytes(q.qname().begin(), q.qname().end()), wire_name({"a.b", "com"}));
}

TEST(ParseQuery, OddBytesInALabelHaveNoCanonicalForm) {
  using namespace std::string_literals;
  for (const std::string& label : {"a\0b"s, "a b"s, "a*"s, "\xC3\xA9"s, "a/b"s, "\x7F"s, "a\\"s}) {
    Query q = parsed(query(wire_name({label, "example", "com"})));
    EXPECT_FALSE(q.canonical_ok) << "label of " << label.size() << " bytes";
  }
}

TEST(ParseQuery, RootNameParsesWithoutCanonicalForm) {
  Query q = parsed(query(Bytes{0}, rr_type::NS));
  EXPECT_FALSE(q.canonical_ok);
  EXPECT_EQ(q.qname_wire_len, 1);
  EXPECT_EQ(q.qname()[0], 0);
}

TEST(ParseQuery, DescribeNamesEveryError) {
  for (auto e : {QueryError::too_short, QueryError::not_a_query, QueryError::question_count,
                 QueryError::unexpected_records, QueryError::bad_name, QueryError::compression_loop,
                 QueryError::bad_additional, QueryError::trailing_bytes}) {
    EXPECT_FALSE(describe(e).empty());
  }
  EXPECT_NE(describe(QueryError::bad_name), describe(QueryError::compression_loop));
}

TEST(PeekId, ReadsTheFirstTwoBytes) {
  EXPECT_FALSE(peek_id(Bytes{}).has_value());
  EXPECT_FALSE(peek_id(Bytes{0x12}).has_value());
  EXPECT_EQ(peek_id(Bytes{0x12, 0x34}), 0x1234);
  EXPECT_EQ(peek_id(query("example.com")), kId);
}

// ---- builders -------------------------------------------------------------

// Checks the header of a built answer and returns the byte after the question.
void expect_answer_header(const Bytes& a, const Query& q, std::uint8_t rcode, std::uint16_t arcount) {
  ASSERT_GE(a.size(), kHeaderSize);
  const std::uint16_t flags = get16(a, 2);
  EXPECT_EQ(get16(a, 0), q.id);
  EXPECT_TRUE(flags & kQR);
  EXPECT_TRUE(flags & kRA);
  EXPECT_FALSE(flags & kAA);
  EXPECT_EQ((flags >> 11) & 0xF, q.opcode);
  EXPECT_EQ((flags & kRD) != 0, q.recursion_desired);
  EXPECT_EQ((flags & kCD) != 0, q.checking_disabled);
  EXPECT_EQ(flags & 0xF, rcode & 0xF);
  EXPECT_EQ(get16(a, 4), 1);
  EXPECT_EQ(get16(a, 6), 0);
  EXPECT_EQ(get16(a, 8), 0);
  EXPECT_EQ(get16(a, 10), arcount);
}

// An answer with QR cleared is a query again: parse it to read its question
// and OPT back with the code under test.
Query reparse_as_query(Bytes answer) {
  answer[2] &= 0x7F;
  return parsed(answer);
}

TEST(BuildEmptyAnswer, WithoutEdns) {
  Bytes msg = query("ExAmple.com", rr_type::AAAA);
  Query q = parsed(msg);
  Bytes out = {1, 2, 3};  // cleared first
  build_empty_answer(q, rcode::REFUSED, out);
  expect_answer_header(out, q, rcode::REFUSED, 0);
  // The question is echoed byte for byte (the guest's case too).
  EXPECT_EQ(Bytes(out.begin() + kHeaderSize, out.end()), Bytes(msg.begin() + kHeaderSize, msg.end()));
  Query back = reparse_as_query(out);
  EXPECT_FALSE(back.has_edns);
  EXPECT_EQ(back.qtype, rr_type::AAAA);
  EXPECT_EQ(back.name.view(), "example.com");
}

TEST(BuildEmptyAnswer, WithEdnsEchoesDo) {
  Query q = parsed(query("example.com", rr_type::A, Opt().size(1232).with_do(), kRD | kCD));
  Bytes out;
  build_empty_answer(q, rcode::NXDOMAIN, out);
  expect_answer_header(out, q, rcode::NXDOMAIN, 1);
  Query back = reparse_as_query(out);
  EXPECT_TRUE(back.has_edns);
  EXPECT_TRUE(back.dnssec_ok);
  EXPECT_EQ(back.edns_udp_size, kMaxAdvertisedUdpSize);
  EXPECT_EQ(back.edns_version, 0);
  std::vector<std::uint16_t> ttls = {7};
  EXPECT_TRUE(find_ttl_offsets(out, ttls));
  EXPECT_TRUE(ttls.empty());  // the OPT has no TTL
}

TEST(BuildEmptyAnswer, KeepsOpcodeAndClearsRdWhenTheQueryDid) {
  Query q = parsed(query("example.com", rr_type::A, std::nullopt, 4 << 11));  // NOTIFY, RD clear
  Bytes out;
  build_empty_answer(q, rcode::NOTIMP, out);
  expect_answer_header(out, q, rcode::NOTIMP, 0);
}

TEST(BuildEmptyAnswer, ExtendedRcodeGoesIntoTheOpt) {
  Query q = parsed(query("example.com", rr_type::A, Opt().ver(1)));
  Bytes out;
  build_empty_answer(q, 16, out);  // BADVERS
  EXPECT_EQ(get16(out, 2) & 0xF, 0);
  const std::size_t opt_ttl = out.size() - 6;
  EXPECT_EQ(get32(out, opt_ttl) >> 24, 1U);
}

TEST(BuildEmptyAnswer, LdnsAgrees) {
  Query q = parsed(query("Example.COM", rr_type::AAAA, Opt().with_do()));
  Bytes out;
  build_empty_answer(q, rcode::SERVFAIL, out);
  ldns_pkt* raw = nullptr;
  ASSERT_EQ(ldns_wire2pkt(&raw, out.data(), out.size()), LDNS_STATUS_OK);
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt(raw, ldns_pkt_free);
  EXPECT_EQ(ldns_pkt_id(pkt.get()), kId);
  EXPECT_TRUE(ldns_pkt_qr(pkt.get()));
  EXPECT_TRUE(ldns_pkt_ra(pkt.get()));
  EXPECT_TRUE(ldns_pkt_rd(pkt.get()));
  EXPECT_EQ(ldns_pkt_get_rcode(pkt.get()), LDNS_RCODE_SERVFAIL);
  EXPECT_EQ(ldns_pkt_ancount(pkt.get()), 0);
  EXPECT_TRUE(ldns_pkt_edns_do(pkt.get()));
  ASSERT_EQ(ldns_pkt_qdcount(pkt.get()), 1);
  ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(pkt.get()), 0);
  EXPECT_EQ(ldns_rr_get_type(question), LDNS_RR_TYPE_AAAA);
  std::unique_ptr<char, decltype(&std::free)> owner(ldns_rdf2str(ldns_rr_owner(question)), std::free);
  EXPECT_STREQ(owner.get(), "Example.COM.");
}

TEST(BuildFormerr, NeedsAnId) {
  Bytes out = {9, 9};
  EXPECT_FALSE(build_formerr(Bytes{0x12}, out));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(build_formerr(Bytes{}, out));
  EXPECT_TRUE(out.empty());
}

TEST(BuildFormerr, EchoesTheIdOnly) {
  // 12 bytes of header with every flag set and bogus counts.
  Bytes msg = {0xAB, 0xCD, 0xFF, 0xFF, 0x00, 0x05, 0x00, 0x06, 0x00, 0x07, 0x00, 0x08};
  Bytes out;
  ASSERT_TRUE(build_formerr(msg, out));
  EXPECT_EQ(out, (Bytes{0xAB, 0xCD, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(build_formerr(Bytes{0x00, 0x07}, out));
  EXPECT_EQ(out.size(), kHeaderSize);
  EXPECT_EQ(get16(out, 0), 7);
}

TEST(BuildUpstreamQuery, OnlyRdAndOurOpt) {
  // Every flag a query may carry, a cookie option, a small UDP size, DO.
  const std::uint16_t guest_flags = kAA | kTC | kZ | kAD | kCD;  // RD clear
  Opt guest_opt = Opt().size(600).with_do().opts({0x00, 0x0A, 0x00, 0x02, 7, 7});
  Query q = parsed(query("WWW.Example.Com", rr_type::HTTPS, guest_opt, guest_flags));
  Bytes out = {1, 2, 3};
  build_upstream_query(q, 0x4242, out);

  EXPECT_EQ(get16(out, 0), 0x4242);
  EXPECT_EQ(get16(out, 2), kRD);  // nothing of the guest's flags
  Query up = parsed(out);
  EXPECT_EQ(Bytes(up.qname().begin(), up.qname().end()), wire_name("www.example.com"));
  EXPECT_EQ(up.qtype, rr_type::HTTPS);
  EXPECT_EQ(up.qclass, kClassIN);
  EXPECT_TRUE(up.has_edns);
  EXPECT_EQ(up.edns_udp_size, kMaxAdvertisedUdpSize);
  EXPECT_TRUE(up.dnssec_ok);
  EXPECT_EQ(up.edns_version, 0);
  // Our OPT carries no options: it is the last 11 bytes, RDLENGTH 0.
  EXPECT_EQ(get16(out, out.size() - 2), 0);
  EXPECT_EQ(out.size(), kHeaderSize + wire_name("www.example.com").size() + 4 + 11);
}

TEST(BuildUpstreamQuery, AddsEdnsAndClearsDoForAPlainQuery) {
  Query q = parsed(query("example.com", rr_type::A, std::nullopt, 0));
  Bytes out;
  build_upstream_query(q, 1, out);
  EXPECT_EQ(get16(out, 2), kRD);
  Query up = parsed(out);
  EXPECT_TRUE(up.has_edns);
  EXPECT_FALSE(up.dnssec_ok);
  EXPECT_EQ(up.edns_udp_size, kMaxAdvertisedUdpSize);
}

TEST(BuildUpstreamQuery, LowercasesOnlyLetters) {
  // Bytes around 'A'..'Z' and a label holding a '.' survive as they are.
  Query q = parsed(query(wire_name({"@[Z`a{", "A.B"})));
  Bytes out;
  build_upstream_query(q, 1, out);
  Query up = parsed(out);
  EXPECT_EQ(Bytes(up.qname().begin(), up.qname().end()), wire_name({"@[z`a{", "a.b"}));
}

TEST(BuildUpstreamQuery, LdnsAgrees) {
  Query q = parsed(query("Mail.Example.ORG", rr_type::MX, Opt().with_do()));
  Bytes out;
  build_upstream_query(q, 0x1234, out);
  ldns_pkt* raw = nullptr;
  ASSERT_EQ(ldns_wire2pkt(&raw, out.data(), out.size()), LDNS_STATUS_OK);
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt(raw, ldns_pkt_free);
  EXPECT_EQ(ldns_pkt_id(pkt.get()), 0x1234);
  EXPECT_FALSE(ldns_pkt_qr(pkt.get()));
  EXPECT_TRUE(ldns_pkt_rd(pkt.get()));
  EXPECT_FALSE(ldns_pkt_cd(pkt.get()));
  EXPECT_EQ(ldns_pkt_get_opcode(pkt.get()), LDNS_PACKET_QUERY);
  EXPECT_TRUE(ldns_pkt_edns(pkt.get()));
  EXPECT_EQ(ldns_pkt_edns_udp_size(pkt.get()), kMaxAdvertisedUdpSize);
  EXPECT_TRUE(ldns_pkt_edns_do(pkt.get()));
  ASSERT_EQ(ldns_pkt_qdcount(pkt.get()), 1);
  ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(pkt.get()), 0);
  EXPECT_EQ(ldns_rr_get_type(question), LDNS_RR_TYPE_MX);
  EXPECT_EQ(ldns_rr_get_class(question), LDNS_RR_CLASS_IN);
  std::unique_ptr<char, decltype(&std::free)> owner(ldns_rdf2str(ldns_rr_owner(question)), std::free);
  EXPECT_STREQ(owner.get(), "mail.example.org.");
}

TEST(ParseQuery, LdnsBuiltQueryParses) {
  std::unique_ptr<ldns_rdf, decltype(&ldns_rdf_deep_free)> name(ldns_dname_new_frm_str("Api.GitHub.com."),
                                                                ldns_rdf_deep_free);
  ASSERT_NE(name, nullptr);
  // ldns_pkt_query_new takes ownership of the name.
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt(
      ldns_pkt_query_new(name.release(), LDNS_RR_TYPE_AAAA, LDNS_RR_CLASS_IN, LDNS_RD | LDNS_CD),
      ldns_pkt_free);
  ldns_pkt_set_id(pkt.get(), 0x5151);
  ldns_pkt_set_edns_udp_size(pkt.get(), 1400);
  ldns_pkt_set_edns_do(pkt.get(), true);
  std::uint8_t* wire = nullptr;
  std::size_t size = 0;
  ASSERT_EQ(ldns_pkt2wire(&wire, pkt.get(), &size), LDNS_STATUS_OK);
  std::unique_ptr<std::uint8_t, decltype(&std::free)> owned(wire, std::free);
  Bytes msg(wire, wire + size);

  Query q = parsed(msg);
  EXPECT_EQ(q.id, 0x5151);
  EXPECT_TRUE(q.recursion_desired);
  EXPECT_TRUE(q.checking_disabled);
  EXPECT_EQ(q.qtype, rr_type::AAAA);
  ASSERT_TRUE(q.canonical_ok);
  EXPECT_EQ(q.name.view(), "api.github.com");
  EXPECT_EQ(Bytes(q.qname().begin(), q.qname().end()), wire_name("Api.GitHub.com"));
  EXPECT_TRUE(q.has_edns);
  EXPECT_EQ(q.edns_udp_size, 1400);
  EXPECT_TRUE(q.dnssec_ok);
}

// ---- a response with compression, for truncate_for_udp and find_ttl_offsets

struct Response {
  Bytes wire;
  std::vector<std::uint32_t> ttls;  // of every non-OPT record, in order
};

// example.com A, answered with:
//   example.com      300  CNAME www.example.com   (owner: pointer to 12)
//   www.example.com   60  A     192.0.2.1         (owner: pointer into the CNAME's RDATA, which
//                                                  itself ends in a pointer to 12)
//   example.com     3600  NS    ns.example.com    (authority)
//   ns.example.com   120  A     192.0.2.53        (additional; owner: pointer into the NS RDATA)
//   OPT (DO set, extended RCODE 0)                (additional, when with_opt)
Response compressed_response(bool with_opt, std::uint16_t flags = kQR | kRD | kRA | kAA) {
  Response r;
  Bytes& b = r.wire;
  b = header(flags, 1, 2, 1, with_opt ? 2 : 1);
  append(b, wire_name("example.com"));  // at 12
  put16(b, rr_type::A);
  put16(b, kClassIN);

  auto record = [&](const Bytes& owner, std::uint16_t type, std::uint32_t ttl, const Bytes& rdata) {
    append(b, owner);
    put16(b, type);
    put16(b, kClassIN);
    put32(b, ttl);
    put16(b, static_cast<std::uint16_t>(rdata.size()));
    append(b, rdata);
    r.ttls.push_back(ttl);
  };
  const std::size_t cname_rdata = b.size() + 2 + 10;
  record({0xC0, 0x0C}, rr_type::CNAME, 300, {3, 'w', 'w', 'w', 0xC0, 0x0C});
  record({0xC0, static_cast<std::uint8_t>(cname_rdata)}, rr_type::A, 60, {192, 0, 2, 1});
  const std::size_t ns_rdata = b.size() + 2 + 10;
  record({0xC0, 0x0C}, rr_type::NS, 3600, {2, 'n', 's', 0xC0, 0x0C});
  record({0xC0, static_cast<std::uint8_t>(ns_rdata)}, rr_type::A, 120, {192, 0, 2, 53});
  if (with_opt) put_opt(b, Opt().size(4096).with_do());
  return r;
}

TEST(FindTtlOffsets, PointsAtEveryTtlOfACompressedResponse) {
  for (bool with_opt : {false, true}) {
    Response r = compressed_response(with_opt);
    std::vector<std::uint16_t> offsets;
    ASSERT_TRUE(find_ttl_offsets(r.wire, offsets));
    ASSERT_EQ(offsets.size(), r.ttls.size());  // the OPT is skipped
    for (std::size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(get32(r.wire, offsets[i]), r.ttls[i]);
  }
}

TEST(FindTtlOffsets, LdnsReadsTheSameResponse) {
  Response r = compressed_response(true);
  ldns_pkt* raw = nullptr;
  ASSERT_EQ(ldns_wire2pkt(&raw, r.wire.data(), r.wire.size()), LDNS_STATUS_OK);
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt(raw, ldns_pkt_free);
  std::vector<std::uint32_t> ldns_ttls;
  for (ldns_rr_list* section :
       {ldns_pkt_answer(pkt.get()), ldns_pkt_authority(pkt.get()), ldns_pkt_additional(pkt.get())}) {
    for (std::size_t i = 0; i < ldns_rr_list_rr_count(section); ++i)
      ldns_ttls.push_back(ldns_rr_ttl(ldns_rr_list_rr(section, i)));
  }
  EXPECT_EQ(ldns_ttls, r.ttls);
  std::unique_ptr<char, decltype(&std::free)> owner(
      ldns_rdf2str(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_additional(pkt.get()), 0))), std::free);
  EXPECT_STREQ(owner.get(), "ns.example.com.");
}

TEST(FindTtlOffsets, EveryCutIsRefused) {
  Response r = compressed_response(true);
  std::vector<std::uint16_t> offsets;
  for (std::size_t n = 0; n < r.wire.size(); ++n) {
    EXPECT_FALSE(find_ttl_offsets(std::span(r.wire).first(n), offsets)) << "cut at " << n;
  }
}

TEST(FindTtlOffsets, MalformedResponsesAreRefused) {
  std::vector<std::uint16_t> offsets;
  const Bytes good = compressed_response(false).wire;
  // The first answer's owner pointer is at 12 + 13 + 4 = 29.
  const std::size_t owner = kHeaderSize + wire_name("example.com").size() + 4;
  ASSERT_EQ(good[owner], 0xC0);

  Bytes trailing = good;
  trailing.push_back(0);
  EXPECT_FALSE(find_ttl_offsets(trailing, offsets));

  Bytes to_itself = good;
  to_itself[owner + 1] = static_cast<std::uint8_t>(owner);
  EXPECT_FALSE(find_ttl_offsets(to_itself, offsets));

  Bytes forward = good;
  forward[owner + 1] = static_cast<std::uint8_t>(owner + 12);  // into the CNAME's RDATA
  EXPECT_FALSE(find_ttl_offsets(forward, offsets));

  Bytes into_header = good;
  into_header[owner + 1] = 4;
  EXPECT_FALSE(find_ttl_offsets(into_header, offsets));

  Bytes label_type = good;
  label_type[owner] = 0x40;
  EXPECT_FALSE(find_ttl_offsets(label_type, offsets));

  Bytes more_records = good;
  more_records[7] += 1;  // ANCOUNT one more than there are
  EXPECT_FALSE(find_ttl_offsets(more_records, offsets));

  Bytes rdlength = good;
  rdlength[owner + 2 + 8] = 0xFF;  // the CNAME's RDLENGTH high byte
  EXPECT_FALSE(find_ttl_offsets(rdlength, offsets));

  Bytes huge(kMaxMessageSize + 1, 0);
  EXPECT_FALSE(find_ttl_offsets(huge, offsets));

  EXPECT_FALSE(find_ttl_offsets(Bytes{}, offsets));
  EXPECT_FALSE(find_ttl_offsets(Bytes(11, 0), offsets));
  EXPECT_TRUE(find_ttl_offsets(Bytes(12, 0), offsets));  // a bare header walks
  EXPECT_TRUE(offsets.empty());
}

// A record whose owner follows `chain` pointers through an opaque RDATA of
// pointers, then one more into that RDATA: chain + 1 pointers in all.
Bytes pointer_chain_response(std::size_t chain) {
  Bytes b = header(kQR, 1, 2, 0, 0);
  append(b, wire_name("example.com"));  // at 12
  put16(b, rr_type::A);
  put16(b, kClassIN);
  b.insert(b.end(), {0xC0, 0x0C});
  put16(b, 0xFF00);  // a private type: RDATA is opaque to the walk
  put16(b, kClassIN);
  put32(b, 30);
  put16(b, static_cast<std::uint16_t>(2 * chain));
  const std::size_t first = b.size();
  for (std::size_t i = 0; i < chain; ++i) {
    const std::size_t target = i == 0 ? kHeaderSize : first + 2 * (i - 1);
    b.insert(b.end(), {static_cast<std::uint8_t>(0xC0 | (target >> 8)), static_cast<std::uint8_t>(target)});
  }
  const std::size_t last = first + 2 * (chain - 1);
  b.insert(b.end(), {static_cast<std::uint8_t>(0xC0 | (last >> 8)), static_cast<std::uint8_t>(last)});
  put16(b, rr_type::A);
  put16(b, kClassIN);
  put32(b, 40);
  put16(b, 4);
  put32(b, 0xC0000201);
  return b;
}

TEST(FindTtlOffsets, SixteenPointersButNotSeventeen) {
  std::vector<std::uint16_t> offsets;
  Bytes sixteen = pointer_chain_response(15);
  ASSERT_TRUE(find_ttl_offsets(sixteen, offsets));
  ASSERT_EQ(offsets.size(), 2U);
  EXPECT_EQ(get32(sixteen, offsets[1]), 40U);
  EXPECT_FALSE(find_ttl_offsets(pointer_chain_response(16), offsets));
}

TEST(TruncateForUdp, KeepsHeaderAndQuestionAndOpt) {
  Bytes msg = query("ExAmple.com", rr_type::A, Opt().size(512).with_do());
  Query q = parsed(msg);
  Response r = compressed_response(true, kQR | kRD | kRA | kAA | kAD | rcode::NOERROR);
  Bytes answer = r.wire;
  truncate_for_udp(q, answer);

  const std::size_t question = wire_name("example.com").size() + 4;
  ASSERT_EQ(answer.size(), kHeaderSize + question + 11);
  EXPECT_EQ(get16(answer, 0), kId);
  EXPECT_EQ(get16(answer, 2), kQR | kRD | kRA | kAA | kAD | kTC);
  EXPECT_EQ(get16(answer, 4), 1);
  EXPECT_EQ(get16(answer, 6), 0);
  EXPECT_EQ(get16(answer, 8), 0);
  EXPECT_EQ(get16(answer, 10), 1);
  // The guest's spelling of the question.
  EXPECT_EQ(
      Bytes(answer.begin() + kHeaderSize,
            answer.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + question)),
      Bytes(msg.begin() + kHeaderSize, msg.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + question)));
  std::vector<std::uint16_t> offsets;
  EXPECT_TRUE(find_ttl_offsets(answer, offsets));
  EXPECT_TRUE(offsets.empty());
  Query back = reparse_as_query(answer);
  EXPECT_TRUE(back.has_edns);
  EXPECT_TRUE(back.dnssec_ok);
}

TEST(TruncateForUdp, NoOptWithoutEdns) {
  Query q = parsed(query("example.com"));
  Bytes answer = compressed_response(false).wire;
  truncate_for_udp(q, answer);
  EXPECT_EQ(answer.size(), kHeaderSize + wire_name("example.com").size() + 4);
  EXPECT_TRUE(get16(answer, 2) & kTC);
  EXPECT_EQ(get16(answer, 10), 0);
  EXPECT_FALSE(reparse_as_query(answer).has_edns);
}

TEST(TruncateForUdp, KeepsTheAnswersExtendedRcode) {
  Query q = parsed(query("example.com", rr_type::A, Opt().ver(1)));
  Bytes answer;
  build_empty_answer(q, 16, answer);  // BADVERS
  truncate_for_udp(q, answer);
  EXPECT_TRUE(get16(answer, 2) & kTC);
  EXPECT_EQ(get32(answer, answer.size() - 6) >> 24, 1U);
}

}  // namespace
}  // namespace abox::dns

namespace abox::dns {
namespace {

TEST(DropOptRecord, RemovesATrailingOptOnly) {
  Response with = compressed_response(true);
  Response without = compressed_response(false);
  Bytes b = with.wire;
  drop_opt_record(b);
  EXPECT_EQ(b, without.wire);  // the same message, ARCOUNT lowered
  drop_opt_record(b);          // nothing left to drop: unchanged
  EXPECT_EQ(b, without.wire);
  Bytes garbage = {1, 2, 3};
  drop_opt_record(garbage);
  EXPECT_EQ(garbage, (Bytes{1, 2, 3}));
}

}  // namespace
}  // namespace abox::dns
