// Tests for dns/rdata: each known type's RDATA must fill RDLENGTH exactly in
// its own shape; unknown types are opaque; names come out decompressed, and
// compressed again only for the RFC 1035 types.
#include "dns/rdata.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace abox::dns {
namespace {

using Bytes = std::vector<std::uint8_t>;

// A message: a header, "a.b" at 12 (5 bytes), then the RDATA under test at 17.
constexpr std::size_t kRdataAt = 17;
Bytes message(const Bytes& rdata) {
  // Sized once and filled (inserting into a growing vector made GCC 12 at
  // -O3 report false -Warray-bounds).
  Bytes m(kRdataAt + rdata.size(), 0);
  const std::uint8_t name[] = {1, 'a', 1, 'b', 0};
  std::copy(std::begin(name), std::end(name), m.begin() + 12);
  std::copy(rdata.begin(), rdata.end(), m.begin() + kRdataAt);
  return m;
}
bool well_formed(std::uint16_t type, const Bytes& rdata) {
  const Bytes m = message(rdata);
  return rdata_well_formed(m, RdataRef{type, kRdataAt, static_cast<std::uint16_t>(rdata.size())});
}
const Bytes kPtr = {0xC0, 12};  // "a.b" by pointer

TEST(Rdata, FixedSizes) {
  EXPECT_TRUE(well_formed(1, {1, 2, 3, 4}));
  for (std::size_t n : {0u, 3u, 5u, 16u}) EXPECT_FALSE(well_formed(1, Bytes(n, 1))) << n;
  EXPECT_TRUE(well_formed(28, Bytes(16, 1)));
  EXPECT_FALSE(well_formed(28, Bytes(4, 1)));
}

TEST(Rdata, NamesFillTheRdata) {
  EXPECT_TRUE(well_formed(5, kPtr));                // CNAME
  EXPECT_FALSE(well_formed(5, {}));                 // no target
  EXPECT_FALSE(well_formed(5, {0xC0, 12, 0}));      // a byte after the name
  EXPECT_FALSE(well_formed(5, {0xC0, 17}));         // points at itself
  EXPECT_TRUE(well_formed(15, {0, 10, 0xC0, 12}));  // MX
  EXPECT_FALSE(well_formed(15, {0, 10}));           // MX without its name
  Bytes soa = {0xC0, 12, 0xC0, 12};                 // SOA: two names, five numbers
  soa.insert(soa.end(), 20, 0);
  EXPECT_TRUE(well_formed(6, soa));
  soa.pop_back();
  EXPECT_FALSE(well_formed(6, soa));
  EXPECT_TRUE(well_formed(33, {0, 1, 0, 2, 0, 3, 0}));  // SRV to the root
  EXPECT_FALSE(well_formed(33, {0, 1, 0, 2, 0, 3}));
  Bytes rrsig(18, 0);  // 18 fixed bytes, signer, signature
  rrsig.insert(rrsig.end(), {0xC0, 12, 9, 9, 9});
  EXPECT_TRUE(well_formed(46, rrsig));
  EXPECT_FALSE(well_formed(46, Bytes(17, 0)));
  EXPECT_TRUE(well_formed(35, {0, 1, 0, 2, 1, 'S', 0, 0, 0}));   // NAPTR: 3 strings and a name
  EXPECT_FALSE(well_formed(35, {0, 1, 0, 2, 1, 'S', 0, 5, 0}));  // a string past the end
}

TEST(Rdata, Strings) {
  EXPECT_TRUE(well_formed(16, {}));
  EXPECT_TRUE(well_formed(16, {0, 0, 2, 'h', 'i'}));
  EXPECT_FALSE(well_formed(16, {2, 'h'}));
  EXPECT_TRUE(well_formed(13, {1, 'x', 1, 'y'}));  // HINFO: exactly two
  EXPECT_FALSE(well_formed(13, {1, 'x'}));
  EXPECT_FALSE(well_formed(13, {1, 'x', 1, 'y', 0}));
}

TEST(Rdata, UnknownTypesAreOpaque) {
  EXPECT_TRUE(well_formed(0xFF00, {}));
  EXPECT_TRUE(well_formed(0xFF00, {0xC0, 0xFF, 0x40}));  // never read as names
  const Bytes m = message({1, 2});
  EXPECT_FALSE(rdata_well_formed(m, RdataRef{0xFF00, kRdataAt, 3}));  // past the message
}

Bytes written(std::uint16_t type, const Bytes& rdata) {
  const Bytes m = message(rdata);
  Bytes out;
  MessageWriter w(out);
  w.bytes(Bytes(12, 0));
  w.name(Bytes{1, 'a', 1, 'b', 0}, true);  // at 12, a target for compressed names
  write_rdata(w, m, RdataRef{type, kRdataAt, static_cast<std::uint16_t>(rdata.size())});
  EXPECT_FALSE(w.overflowed());
  return Bytes(out.begin() + 17, out.end());
}

TEST(Rdata, WrittenWithCompressionOnlyForRfc1035Types) {
  EXPECT_EQ(written(15, {0, 10, 0xC0, 12}), (Bytes{0, 4, 0, 10, 0xC0, 12}));  // MX
  EXPECT_EQ(written(33, {0, 1, 0, 2, 0, 3, 0xC0, 12}),
            (Bytes{0, 11, 0, 1, 0, 2, 0, 3, 1, 'a', 1, 'b', 0}));  // SRV
  EXPECT_EQ(written(39, kPtr), (Bytes{0, 5, 1, 'a', 1, 'b', 0}));  // DNAME
  EXPECT_EQ(written(0xFF00, kPtr), (Bytes{0, 2, 0xC0, 12}));       // opaque: as is
  EXPECT_EQ(rdata_first_name(message(kPtr), RdataRef{5, kRdataAt, 2})->size, 5);
  EXPECT_FALSE(rdata_first_name(message(kPtr), RdataRef{0xFF00, kRdataAt, 2}));
}

}  // namespace
}  // namespace abox::dns
