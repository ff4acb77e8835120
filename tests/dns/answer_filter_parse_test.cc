// Tests for the parsing and re-encoding side of dns/answer_filter: hostile
// byte layouts (built by hand, as no encoder would write them), RDATA names
// (RFC 3597 section 4, see dns/rdata.h), and a differential check against
// ldns, an independent decoder, on what is kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dns/answer_filter.h"
#include "policy/policy_file.h"
#include "tests/support/dns_names.h"
#include "tests/support/ldns.h"

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::uint16_t kId = 0x4A7B;

const policy::HostAddresses kNoHostAddresses;

const policy::Policy& test_policy() {
  static const policy::Policy p = [] {
    auto r = policy::parse_policy(
        "[[allow]]\nnames=[\"example.com\"]\nports=[443]\n[dns]\nmin_ttl=1\nmax_ttl=86400\n", "t.toml");
    if (!r.ok()) std::abort();
    return std::move(r).value();
  }();
  return p;
}

using abox::testing::wire_name;

// A response to "example.com IN <qtype>" (the name at offset 12), records
// appended by hand.
struct Msg {
  Bytes b = {0x4A, 0x7B, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0};
  explicit Msg(std::uint16_t qtype = 1) {
    Bytes q = wire_name("example.com");
    b.insert(b.end(), q.begin(), q.end());
    b.insert(b.end(), {static_cast<std::uint8_t>(qtype >> 8), static_cast<std::uint8_t>(qtype), 0, 1});
  }
  void count(int section, std::uint16_t n) {
    b[6 + 2 * section] = static_cast<std::uint8_t>(n >> 8);
    b[7 + 2 * section] = static_cast<std::uint8_t>(n);
  }
  // Owner bytes as given, then the fixed fields, RDLENGTH = rdata's size.
  std::size_t rr(const Bytes& owner, std::uint16_t type, const Bytes& rdata) {
    b.insert(b.end(), owner.begin(), owner.end());
    b.insert(b.end(),
             {static_cast<std::uint8_t>(type >> 8), static_cast<std::uint8_t>(type), 0, 1, 0, 0, 1, 0,
              static_cast<std::uint8_t>(rdata.size() >> 8), static_cast<std::uint8_t>(rdata.size())});
    const std::size_t at = b.size();
    b.insert(b.end(), rdata.begin(), rdata.end());
    return at;
  }
};
const Bytes kQname = {0xC0, 0x0C};  // a pointer to the question name

struct Asked {
  Bytes name = wire_name("example.com");
  AskedQuestion q;
  explicit Asked(std::uint16_t qtype = 1) : q{kId, name, qtype, 1} {}
};

FilterError error_of(const Bytes& msg, std::uint16_t qtype = 1) {
  Asked asked(qtype);
  auto r = filter_upstream_answer(msg, asked.q, test_policy(), kNoHostAddresses);
  EXPECT_FALSE(r.ok());
  return r.ok() ? FilterError::too_large : r.error();
}

TEST(AnswerFilterParse, BadOwnerNames) {
  const std::vector<Bytes> owners = {
      {0xC0, 0x00},          // pointer into the header
      {0xC0, 0x0B},          // the header's last byte
      {0xC0, 0xFF},          // forward, past the end
      {1, 'a', 0xC0, 0x1D},  // to itself (offset 29 is this name)
      {0x40, 'a', 0},        // extended label type
      {0x80, 'a', 0},        // reserved label type
      {3, 'w', 'w'},         // runs into the fixed fields
  };
  for (const Bytes& owner : owners) {
    Msg m;
    m.count(0, 1);
    m.rr(owner, 1, {93, 184, 215, 14});
    EXPECT_EQ(error_of(m.b), FilterError::unparsable) << int{owner[0]} << " " << int{owner[1]};
  }
  // 0xC0 as the very last byte.
  Msg last;
  last.count(0, 1);
  last.b.push_back(0xC0);
  EXPECT_EQ(error_of(last.b), FilterError::unparsable);
}

TEST(AnswerFilterParse, NameOver255Bytes) {
  // A CNAME target of 2 x 63-byte labels, then a pointer to a name of
  // 2 x 63 labels + "com": 128 + 132 > 255.
  Msg m;
  m.count(0, 2);
  Bytes long_owner;
  for (int i = 0; i < 2; ++i) {
    long_owner.push_back(63);
    long_owner.insert(long_owner.end(), 63, 'x');
  }
  Bytes owner = long_owner;
  owner.insert(owner.end(), {3, 'c', 'o', 'm', 0});
  const std::size_t owner_at = m.b.size();
  m.rr(owner, 16, {0});  // a TXT owned by that 132-byte name
  Bytes target = long_owner;
  target.insert(target.end(),
                {static_cast<std::uint8_t>(0xC0 | (owner_at >> 8)), static_cast<std::uint8_t>(owner_at)});
  m.rr(kQname, 5, target);
  EXPECT_EQ(error_of(m.b), FilterError::unparsable);
}

TEST(AnswerFilterParse, RdlengthAndCounts) {
  Msg past_end;  // RDLENGTH says 10, 4 bytes follow
  past_end.count(0, 1);
  past_end.rr(kQname, 1, {93, 184, 215, 14});
  past_end.b[past_end.b.size() - 5] = 10;
  EXPECT_EQ(error_of(past_end.b), FilterError::unparsable);

  Msg cut_soa;  // an SOA whose 20 fixed bytes are cut short
  cut_soa.count(1, 1);
  Bytes soa = {0xC0, 0x0C, 0xC0, 0x0C};
  soa.insert(soa.end(), 16, 0);
  cut_soa.rr(kQname, 6, soa);
  EXPECT_EQ(error_of(cut_soa.b), FilterError::unparsable);

  Msg mx_tail;  // an MX with a byte after its name
  mx_tail.count(0, 1);
  mx_tail.rr(kQname, 15, {0, 10, 0xC0, 0x0C, 0});
  EXPECT_EQ(error_of(mx_tail.b, 1), FilterError::unparsable);

  Msg name_past_rdata;  // a CNAME whose target runs past its RDLENGTH
  name_past_rdata.count(0, 1);
  Bytes target = wire_name("a.example.net");
  name_past_rdata.rr(kQname, 5, target);
  name_past_rdata.b[name_past_rdata.b.size() - target.size() - 1] = 3;
  EXPECT_EQ(error_of(name_past_rdata.b), FilterError::unparsable);

  for (std::uint16_t n : {2, 100, 65535}) {  // more records than the message holds
    Msg m;
    m.count(0, 1);
    m.rr(kQname, 1, {93, 184, 215, 14});
    for (int section = 0; section < 3; ++section) {
      Msg c = m;
      c.count(section, n);
      EXPECT_EQ(error_of(c.b), FilterError::unparsable) << section << " " << n;
    }
  }
}

// The filtered answer decoded by ldns.
struct Decoded {
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt{nullptr, ldns_pkt_free};
  explicit Decoded(const Bytes& wire) {
    ldns_pkt* raw = nullptr;
    EXPECT_EQ(ldns_wire2pkt(&raw, wire.data(), wire.size()), LDNS_STATUS_OK);
    pkt.reset(raw);
  }
  std::string record(ldns_rr_list* list, std::size_t i) const {
    std::unique_ptr<char, decltype(&std::free)> s(ldns_rr2str(ldns_rr_list_rr(list, i)), std::free);
    std::string line(s.get());
    if (!line.empty() && line.back() == '\n') line.pop_back();
    std::replace(line.begin(), line.end(), '\t', ' ');
    return line;
  }
};

bool contains(const Bytes& hay, const Bytes& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

TEST(AnswerFilterParse, UnknownTypeRdataCopiedAsIs) {
  // RDATA of a private type that looks like a compressed name: opaque (RFC
  // 3597), so the bytes reach the guest untouched, never read as a pointer.
  Msg m;
  m.count(0, 2);
  m.rr(kQname, 1, {93, 184, 215, 14});
  const Bytes opaque = {0xC0, 0x0C, 0xC0, 0xFF, 0x40, 0};
  m.rr(kQname, 0xFF00, opaque);
  Asked asked;
  auto r = filter_upstream_answer(m.b, asked.q, test_policy(), kNoHostAddresses);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  Bytes tail = {0xFF, 0x00, 0, 1, 0, 0, 1, 0, 0, 6};
  tail.insert(tail.end(), opaque.begin(), opaque.end());
  EXPECT_TRUE(contains(r->wire, tail));
  EXPECT_EQ(r->wire.size(), m.b.size());
}

TEST(AnswerFilterParse, RdataNamesDecompressedThenCompressedOnlyWhereAllowed) {
  // The question is example.com; an MX and an SRV name mail.example.com, both
  // compressed upstream behind a TXT the filter strips (off the chain).
  Msg m(255);
  m.count(0, 3);
  const std::size_t txt_at = m.rr(wire_name("junk.example.org"), 16, {0});
  (void)txt_at;
  Bytes mail = {4, 'm', 'a', 'i', 'l', 0xC0, 0x0C};
  const std::size_t mx_at = m.rr(kQname, 15, [&] {
    Bytes rd = {0, 10};
    rd.insert(rd.end(), mail.begin(), mail.end());
    return rd;
  }());
  const std::size_t mail_at = mx_at + 2;
  m.rr(kQname, 33,
       {0, 1, 0, 2, 0x01, 0xBB, static_cast<std::uint8_t>(0xC0 | (mail_at >> 8)),
        static_cast<std::uint8_t>(mail_at)});
  Asked asked(255);
  auto r = filter_upstream_answer(m.b, asked.q, test_policy(), kNoHostAddresses);
  ASSERT_TRUE(r.ok()) << describe(r.error());
  EXPECT_EQ(r->stripped_records, 1u);
  Decoded seen(r->wire);
  ldns_rr_list* answer = ldns_pkt_answer(seen.pkt.get());
  ASSERT_EQ(ldns_rr_list_rr_count(answer), 2u);
  EXPECT_EQ(seen.record(answer, 0), "example.com. 256 IN MX 10 mail.example.com.");
  EXPECT_EQ(seen.record(answer, 1), "example.com. 256 IN SRV 1 2 443 mail.example.com.");
  // The MX's name is compressed against the question; the SRV's is written
  // in full (RFC 2782 forbids compressing it).
  EXPECT_TRUE(contains(r->wire, Bytes{0, 10, 4, 'm', 'a', 'i', 'l', 0xC0, 0x0C}));
  EXPECT_TRUE(contains(r->wire, [] {
    Bytes srv = {0x01, 0xBB};
    Bytes full = wire_name("mail.example.com");
    srv.insert(srv.end(), full.begin(), full.end());
    return srv;
  }()));
}

// Differential: whatever the filter keeps, ldns reads from our output exactly
// as it read it from upstream's bytes (TTLs aside, which the filter clamps).
std::multiset<std::string> records_without_ttl(const Bytes& wire, bool& ok) {
  std::multiset<std::string> out;
  ldns_pkt* raw = nullptr;
  ok = ldns_wire2pkt(&raw, wire.data(), wire.size()) == LDNS_STATUS_OK;
  if (!ok) return out;
  std::unique_ptr<ldns_pkt, decltype(&ldns_pkt_free)> pkt(raw, ldns_pkt_free);
  for (ldns_rr_list* list : {ldns_pkt_answer(raw), ldns_pkt_authority(raw), ldns_pkt_additional(raw)}) {
    for (std::size_t i = 0; i < ldns_rr_list_rr_count(list); ++i) {
      ldns_rr* rr = ldns_rr_list_rr(list, i);
      ldns_rr_set_ttl(rr, 0);
      std::unique_ptr<char, decltype(&std::free)> s(ldns_rr2str(rr), std::free);
      std::string line(s.get());
      std::transform(line.begin(), line.end(), line.begin(), [](unsigned char c) { return std::tolower(c); });
      out.insert(line);
    }
  }
  return out;
}

TEST(AnswerFilterParse, LdnsReadsOurOutputAsItReadTheInput) {
  // The fuzz seeds, each asked its own question, and kept records compared.
  std::size_t compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ABOX_SOURCE_DIR "/fuzz/corpus/dns_answer")) {
    std::ifstream f(entry.path(), std::ios::binary);
    Bytes msg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (msg.size() < 12) continue;
    // The question as ldns reads it, asked back.
    std::size_t pos = 12;
    ldns_rr* q = nullptr;
    if (ldns_wire2rr(&q, msg.data(), msg.size(), &pos, LDNS_SECTION_QUESTION) != LDNS_STATUS_OK) continue;
    std::unique_ptr<ldns_rr, decltype(&ldns_rr_free)> question(q, ldns_rr_free);
    const ldns_rdf* owner = ldns_rr_owner(q);
    Bytes name(ldns_rdf_data(owner), ldns_rdf_data(owner) + ldns_rdf_size(owner));
    const AskedQuestion asked{static_cast<std::uint16_t>((msg[0] << 8) | msg[1]), name,
                              static_cast<std::uint16_t>(ldns_rr_get_type(q)),
                              static_cast<std::uint16_t>(ldns_rr_get_class(q))};
    auto r = filter_upstream_answer(msg, asked, test_policy(), kNoHostAddresses);
    if (!r.ok()) continue;
    bool in_ok = false;
    bool out_ok = false;
    const auto in = records_without_ttl(msg, in_ok);
    const auto out = records_without_ttl(r->wire, out_ok);
    EXPECT_TRUE(out_ok) << entry.path();
    if (!in_ok) continue;  // ldns refuses some upstream shapes we accept
    for (const auto& line : out)
      EXPECT_EQ(in.count(line) >= out.count(line), true) << entry.path() << ": " << line;
    ++compared;
  }
  EXPECT_GT(compared, 5u);  // the seeds hold well-formed answers: the check ran
}

}  // namespace
}  // namespace abox::dns
