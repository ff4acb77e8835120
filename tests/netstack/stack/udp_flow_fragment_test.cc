// A host datagram longer than the guest's MTU (1500 here) reaches the guest
// in IP fragments, IPv4 and IPv6, each frame within the MTU, and the guest
// (this test) reassembles exactly what the server sent, with a right UDP
// checksum over the whole datagram. Before lwIP fragmented (lwipopts.h
// IP_FRAG, LWIP_IPV6_FRAG), such a datagram left as one oversized frame that
// the link dropped, while the flow counted it as delivered.
//
// The guest is the test over a StreamLink (stream_stack_support.h), the
// server a real UDP socket on loopback (127.0.0.1, ::1); both flows run
// through the stack's admission (example.com answered as the loopback
// address, lifted by [unsafe]). The fragments are read and put together
// here, by a reader of their own, not by the code under test.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "netstack/stack/guest_frame.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"
#include "tests/netstack/stack/flow_test_support.h"
#include "tests/netstack/stack/guest_wire.h"
#include "tests/netstack/stack/ipv6_wire.h"
#include "tests/netstack/stack/stream_stack_support.h"

namespace abox::netstack {
namespace {

using guest_wire::Bytes;
using guest_wire::get16;
using guest_wire::get32;

constexpr std::size_t kMtu = 1500;
constexpr std::size_t kBigDatagram = 3000;

Bytes big_payload() {
  Bytes b(kBigDatagram);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return b;
}

// One IP packet's fragments put back together: the upper layer (here the
// UDP header and payload) and the pseudo-header sum its checksum starts from.
struct Reassembled {
  Bytes upper;
  std::uint32_t pseudo_sum = 0;
  std::size_t fragments = 0;
  std::size_t largest_frame = 0;
};

// Pieces of one packet by offset; whole once the piece without "more" came
// and the offsets leave no hole.
struct Pieces {
  std::map<std::size_t, Bytes> by_offset;
  std::optional<std::size_t> total;
  std::uint32_t pseudo_sum = 0;
  std::size_t largest_frame = 0;

  std::optional<Reassembled> whole() const {
    if (!total) return std::nullopt;
    Reassembled r;
    for (const auto& [at, bytes] : by_offset) {
      if (at != r.upper.size()) return std::nullopt;
      r.upper.insert(r.upper.end(), bytes.begin(), bytes.end());
    }
    if (r.upper.size() != *total) return std::nullopt;
    r.pseudo_sum = pseudo_sum;
    r.fragments = by_offset.size();
    r.largest_frame = largest_frame;
    return r;
  }
};

// The IPv4 UDP fragments among `frames`, by IP id.
void take_ipv4_fragments(const std::vector<Bytes>& frames, std::map<std::uint16_t, Pieces>& out) {
  for (const Bytes& f : frames) {
    if (f.size() < 34 || get16(f, 12) != 0x0800 || f[23] != 17) continue;
    const std::size_t ihl = (f[14] & 0x0Fu) * 4u;
    const std::size_t total = get16(f, 16);
    if (ihl < 20 || total < ihl || 14 + total > f.size()) continue;
    const std::uint16_t flags_offset = get16(f, 20);
    if ((flags_offset & 0x3FFF) == 0) continue;  // not a fragment
    Pieces& p = out[get16(f, 18)];
    const std::size_t offset = std::size_t{flags_offset & 0x1FFFu} * 8;
    p.by_offset[offset] =
        Bytes(f.begin() + static_cast<long>(14 + ihl), f.begin() + static_cast<long>(14 + total));
    if ((flags_offset & 0x2000) == 0) p.total = offset + total - ihl;
    p.largest_frame = std::max(p.largest_frame, f.size());
    std::uint32_t sum = sum16(std::span<const std::uint8_t>(f).subspan(26, 8));  // source, destination
    p.pseudo_sum = sum + 17;
  }
}

// The IPv6 fragments of UDP among `frames`, by fragment id.
void take_ipv6_fragments(const std::vector<Bytes>& frames, std::map<std::uint32_t, Pieces>& out) {
  constexpr std::size_t kFixed = 14 + 40;
  for (const Bytes& f : frames) {
    if (f.size() < kFixed + 8 || get16(f, 12) != 0x86DD || f[20] != ipv6_wire::kFragment) continue;
    const std::size_t payload_length = get16(f, 18);
    if (payload_length < 8 || 14 + 40 + payload_length > f.size() || f[kFixed] != 17) continue;
    const std::uint16_t offset_more = get16(f, kFixed + 2);
    Pieces& p = out[get32(f, kFixed + 4)];
    const std::size_t offset = std::size_t{offset_more & 0xFFF8u};
    const std::size_t length = payload_length - 8;
    p.by_offset[offset] =
        Bytes(f.begin() + static_cast<long>(kFixed + 8), f.begin() + static_cast<long>(kFixed + 8 + length));
    if ((offset_more & 1) == 0) p.total = offset + length;
    p.largest_frame = std::max(p.largest_frame, f.size());
    p.pseudo_sum = sum16(std::span<const std::uint8_t>(f).subspan(22, 32)) + 17;
  }
}

template <typename Key>
std::optional<Reassembled> first_whole(const std::map<Key, Pieces>& packets) {
  for (const auto& [id, p] : packets)
    if (auto r = p.whole()) return r;
  return std::nullopt;
}

// The UDP payload of a reassembled datagram once its header and checksum
// hold up (the checksum may not be 0: over IPv6 that is invalid, and lwIP
// sends 0xFFFF for a sum of 0 over IPv4).
std::optional<Bytes> udp_payload_checked(const Reassembled& r, std::uint16_t src_port,
                                         std::uint16_t dst_port) {
  EXPECT_GE(r.upper.size(), 8u);
  if (r.upper.size() < 8) return std::nullopt;
  EXPECT_EQ(get16(r.upper, 0), src_port);
  EXPECT_EQ(get16(r.upper, 2), dst_port);
  EXPECT_EQ(get16(r.upper, 4), r.upper.size()) << "the UDP length";
  EXPECT_NE(get16(r.upper, 6), 0) << "a UDP checksum left 0";
  const std::uint32_t sum = r.pseudo_sum + static_cast<std::uint32_t>(r.upper.size());
  EXPECT_EQ(fold_checksum(sum16(r.upper, sum)), 0) << "the UDP checksum over the whole datagram";
  return Bytes(r.upper.begin() + 8, r.upper.end());
}

// The server's side: a UDP socket on a loopback address.
struct Server {
  base::UniqueFd fd;
  std::uint16_t port = 0;
  sockaddr_storage peer{};
  socklen_t peer_len = 0;

  explicit Server(bool v6) {
    fd.reset(::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (v6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_loopback;
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(flow_test::kLoopback);
      len = sizeof *a;
    }
    if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      ADD_FAILURE() << "server socket: " << std::strerror(errno);
      return;
    }
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  // True once a datagram came (its sender kept as the peer to answer).
  bool received() {
    std::array<std::uint8_t, 2048> buf{};
    peer_len = sizeof peer;
    return ::recvfrom(fd.get(), buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&peer),
                      &peer_len) >= 0;
  }
  void reply(const Bytes& payload) const {
    ASSERT_EQ(::sendto(fd.get(), payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&peer),
                       peer_len),
              static_cast<ssize_t>(payload.size()))
        << std::strerror(errno);
  }
};

TEST(UdpFlowFragmentTest, AnIpv4DatagramOverTheMtuReachesTheGuestInFragments) {
  Server server(false);
  flow_test::FlowRig rig;
  flow_test::StackOptions o;
  o.port = server.port;
  o.udp = true;
  rig.start(o);
  const std::uint16_t port = flow_test::FlowRig::fresh_port();
  rig.send(guest_wire::udp_datagram(port, flow_test::kLoopback, server.port, guest_wire::bytes_of("big?")));
  ASSERT_TRUE(rig.turn_until([&] { return server.received(); }, [](auto) {})) << "the server got nothing";
  (void)rig.frames();

  const Bytes payload = big_payload();
  server.reply(payload);
  std::map<std::uint16_t, Pieces> packets;
  std::optional<Reassembled> whole;
  for (int i = 0; i < 500 && !whole; ++i) {
    rig.wait_turn();
    take_ipv4_fragments(rig.frames(), packets);
    whole = first_whole(packets);
  }
  ASSERT_TRUE(whole.has_value()) << "the fragments of " << kBigDatagram << " bytes never all came";
  EXPECT_GE(whole->fragments, 3u);  // 1480 + 1480 + 48 bytes of UDP
  EXPECT_LE(whole->largest_frame, kMtu + 14);
  EXPECT_EQ(udp_payload_checked(*whole, server.port, port), payload);
}

// IPv6: lwIP resolves the guest's address first (one solicitation, which the
// test answers), on a small answer; the big one then goes in fragments.
TEST(UdpFlowFragmentTest, AnIpv6DatagramOverTheMtuReachesTheGuestInFragments) {
  Server server(true);
  stream_stack_test::StreamStackRig rig(kMtu);
  ASSERT_TRUE(rig.link);
  auto parsed = policy::parse_policy(
      "[dns]\nupstreams = [\"127.0.0.1:9\"]\n[[allow]]\nnames = [\"example.com\"]\n"
      "ports = [" +
          std::to_string(server.port) +
          "]\nprotocols = [\"udp\"]\n"
          "[unsafe]\nallow_reserved = [\"::1/128\"]\n",
      "fragment6.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  const policy::Policy pol = std::move(parsed).value();
  GuestConfig config;
  config.instance = "fragment6";
  config.ipv6_neighbour_discovery = true;
  config.ipv6_flows = true;
  GuestStack stack(rig.loop, *rig.link, pol, rig.upstreams, rig.events, rig.random, config);
  const ipv6_wire::Address loopback6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const ipv6_wire::Address gateway_link_local = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  stack.answer_table().record(policy::IpAddress::v6(loopback6), "example.com",
                              rig.loop.now() + base::Seconds(60), rig.loop.now());
  Bytes in;
  auto turn = [&] {
    stack.poll_link();
    rig.loop.run_once(base::Millis(1));
    return guest_wire::read_frames(rig.vmm.get(), in);
  };
  auto send = [&](const Bytes& frame) {
    stream_stack_test::write_all(rig.vmm.get(), guest_wire::record(frame));
  };

  constexpr std::uint16_t kGuestPort = 41500;
  Bytes udp = ipv6_wire::udp(kGuestPort, server.port, guest_wire::bytes_of("big?"));
  std::uint32_t sum = sum16(ipv6_wire::kLinkLocal);
  sum = sum16(loopback6, sum) + static_cast<std::uint32_t>(udp.size()) + 17;
  const std::uint16_t c = fold_checksum(sum16(udp, sum));
  udp[6] = static_cast<std::uint8_t>(c >> 8);
  udp[7] = static_cast<std::uint8_t>(c);
  send(ipv6_wire::ipv6_frame(ipv6_wire::kUdp, udp, ipv6_wire::kLinkLocal, loopback6));
  bool got = false;
  for (int i = 0; i < 500 && !got; ++i) {
    (void)turn();
    got = server.received();
  }
  ASSERT_TRUE(got) << "the server got nothing";
  ASSERT_EQ(stack.counters().udp_admitted, 1u);

  // A small answer: lwIP solicits the guest's address, the guest advertises it.
  server.reply(guest_wire::bytes_of("small"));
  bool solicited = false;
  for (int i = 0; i < 500 && !solicited; ++i) {
    for (const Bytes& f : turn()) {
      const auto v = GuestFrame::parse(f);
      solicited = solicited || (v.ok() && v->is_ipv6() && v->ipv6().icmp_type == 135);
    }
  }
  ASSERT_TRUE(solicited) << "lwIP never solicited the guest's address";
  Bytes na{0x60, 0, 0, 0};  // solicited, override
  na.insert(na.end(), ipv6_wire::kLinkLocal.begin(), ipv6_wire::kLinkLocal.end());
  na.insert(na.end(), {2, 1, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02});  // the guest's MAC
  send(ipv6_wire::ndp(136, na, ipv6_wire::kLinkLocal, gateway_link_local));
  for (int i = 0; i < 20; ++i) (void)turn();

  const Bytes payload = big_payload();
  server.reply(payload);
  std::map<std::uint32_t, Pieces> packets;
  std::optional<Reassembled> whole;
  for (int i = 0; i < 500 && !whole; ++i) {
    take_ipv6_fragments(turn(), packets);
    whole = first_whole(packets);
  }
  ASSERT_TRUE(whole.has_value()) << "the fragments of " << kBigDatagram << " bytes never all came";
  EXPECT_GE(whole->fragments, 3u);  // 1448 + 1448 + 112 bytes of UDP
  EXPECT_LE(whole->largest_frame, kMtu + 14);
  EXPECT_EQ(udp_payload_checked(*whole, server.port, kGuestPort), payload);
}

}  // namespace
}  // namespace abox::netstack
