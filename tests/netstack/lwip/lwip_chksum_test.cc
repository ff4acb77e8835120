// abox_lwip_chksum (netstack/lwip/chksum.c), lwIP's LWIP_CHKSUM: checked
// against a plain byte-by-byte Internet checksum at every length and
// alignment that matters, on data that makes the carries work hardest, and
// through lwIP's own inet_chksum() on a real IPv4 header.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "lwip/inet_chksum.h"

namespace {

// RFC 1071, one big-endian 16-bit word at a time; the result in network order.
std::uint16_t reference_network_order(const std::uint8_t* p, std::size_t n) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2 == 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

// What lwIP expects from LWIP_CHKSUM: that sum as the host reads it from memory.
std::uint16_t reference_host_view(const std::uint8_t* p, std::size_t n) {
  std::uint16_t net = reference_network_order(p, n);
  std::uint8_t bytes[2] = {static_cast<std::uint8_t>(net >> 8), static_cast<std::uint8_t>(net)};
  std::uint16_t host = 0;
  std::memcpy(&host, bytes, 2);
  return host;
}

// The one's complement sum has two zeros; either is the same checksum.
bool same_sum(std::uint16_t a, std::uint16_t b) {
  auto norm = [](std::uint16_t v) { return v == 0xFFFF ? std::uint16_t{0} : v; };
  return norm(a) == norm(b);
}

TEST(LwipChksumTest, MatchesTheReferenceAtEveryLengthAndAlignment) {
  std::mt19937 rng(1234);
  std::vector<std::uint8_t> buf(600);
  for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t len = 0; len <= 300; ++len) {
      const std::uint8_t* p = buf.data() + offset;
      ASSERT_TRUE(same_sum(abox_lwip_chksum(p, static_cast<int>(len)), reference_host_view(p, len)))
          << "offset " << offset << " length " << len;
    }
  }
}

TEST(LwipChksumTest, CarriesOnAllOnesAndLargeBuffers) {
  for (std::uint8_t fill : {std::uint8_t{0xFF}, std::uint8_t{0xFE}, std::uint8_t{0x80}, std::uint8_t{0x00}}) {
    std::vector<std::uint8_t> buf(65535 + 8, fill);
    for (std::size_t len :
         {std::size_t{1}, std::size_t{31}, std::size_t{4096}, std::size_t{65534}, std::size_t{65535}}) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
        const std::uint8_t* p = buf.data() + offset;
        ASSERT_TRUE(same_sum(abox_lwip_chksum(p, static_cast<int>(len)), reference_host_view(p, len)))
            << "fill " << int{fill} << " offset " << offset << " length " << len;
      }
    }
  }
  std::mt19937 rng(99);
  std::vector<std::uint8_t> big(65535);
  for (auto& b : big) b = static_cast<std::uint8_t>(rng());
  EXPECT_TRUE(same_sum(abox_lwip_chksum(big.data(), 65535), reference_host_view(big.data(), 65535)));
}

TEST(LwipChksumTest, ZeroOrNegativeLengthSumsNothing) {
  const std::uint8_t b[4] = {1, 2, 3, 4};
  EXPECT_EQ(abox_lwip_chksum(b, 0), 0);
  EXPECT_EQ(abox_lwip_chksum(b, -5), 0);
}

TEST(LwipChksumTest, LwipsInetChksumVerifiesARealIpv4Header) {
  // 10.0.2.15 -> 93.184.216.34, TCP, 60 bytes; checksum field filled in by hand.
  std::array<std::uint8_t, 20> ip = {0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06,
                                     0x00, 0x00, 0x0a, 0x00, 0x02, 0x0f, 0x5d, 0xb8, 0xd8, 0x22};
  std::uint16_t c = static_cast<std::uint16_t>(~reference_network_order(ip.data(), ip.size()));
  ip[10] = static_cast<std::uint8_t>(c >> 8);
  ip[11] = static_cast<std::uint8_t>(c);
  EXPECT_EQ(inet_chksum(ip.data(), static_cast<u16_t>(ip.size())), 0);  // a valid header sums to 0xFFFF
  ip[15] ^= 1;                                                          // one bit off
  EXPECT_NE(inet_chksum(ip.data(), static_cast<u16_t>(ip.size())), 0);
}

}  // namespace
