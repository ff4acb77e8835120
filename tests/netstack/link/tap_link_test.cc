// TapLink against real network namespaces and tap devices. The Link
// contract, which the tap joins twice (create_in_netns and from_fd), is in
// link_contract_test.cc; the helpers both use are in link_test_support.h.
//
// Each test makes its own namespace (abox-tap-test-<pid>-<n>) and deletes it
// when done, pass or fail. Tests that need namespaces skip when not root;
// CI runs as root, so there they really run.
#include "netstack/link/tap_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "tests/netstack/link/link_test_support.h"

namespace abox::netstack {
namespace {

using namespace link_test;  // NOLINT(google-build-using-namespace): the helpers of these tests

// ---------------------------------------------------------------------------
// TapLink itself.

class TapLinkTest : public ::testing::Test {
 protected:
  void SetUp() override { ABOX_NEEDS_ROOT(kNeedRoot); }
  static std::unique_ptr<TapLink> create(const ScopedNetns& ns, const GuestNetConfig& config = {}) {
    auto link = TapLink::create_in_netns(ns.name(), config);
    if (!link) {
      ADD_FAILURE() << link.error();
      return nullptr;
    }
    return std::move(link).value();
  }
};

// A packet socket on `ifname` inside `ns` that carries a virtio_net_hdr
// before each frame (PACKET_VNET_HDR), taking `protocol` (ETH_P_ALL to send,
// ETH_P_IP to watch); empty if any step failed.
base::UniqueFd vnet_packet_socket(const ScopedNetns& ns, const std::string& ifname, int protocol) {
  return in_netns(ns.path(), [&] {
    base::UniqueFd s(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(protocol)));
    int on = 1;
    if (!s || ::setsockopt(s.get(), SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0)
      return base::UniqueFd();
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(protocol);
    at.sll_ifindex = static_cast<int>(::if_nametoindex(ifname.c_str()));
    if (at.sll_ifindex == 0 || ::bind(s.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
      return base::UniqueFd();
    }
    return s;
  });
}

// struct virtio_net_hdr, as a packet socket with PACKET_VNET_HDR takes and
// gives it before each frame.
struct VnetHeader {
  std::uint8_t flags = 0;
  std::uint8_t gso_type = 0;
  std::uint16_t hdr_len = 0;
  std::uint16_t gso_size = 0;
  std::uint16_t csum_start = 0;
  std::uint16_t csum_offset = 0;
};
static_assert(sizeof(VnetHeader) == 10);

// As the guest's kernel: hands eth0 one TCP frame of `f.size()` bytes that
// needs its checksum and segmenting (gso_type 1 TCPv4, 4 TCPv6).
void send_as_gso(int sender, const Frame& f, std::uint8_t gso_type, std::uint16_t headers, std::uint16_t mss,
                 std::uint16_t csum_start) {
  VnetHeader vnet{.flags = 1,
                  .gso_type = gso_type,
                  .hdr_len = headers,
                  .gso_size = mss,
                  .csum_start = csum_start,
                  .csum_offset = 16};  // NEEDS_CSUM, the TCP checksum
  std::array<iovec, 2> iov = {{{&vnet, sizeof vnet}, {const_cast<std::uint8_t*>(f.data()), f.size()}}};
  ASSERT_EQ(::writev(sender, iov.data(), 2), static_cast<ssize_t>(sizeof vnet + f.size()))
      << std::strerror(errno);
}

// The size of the first frame the link hands over that `is_it` picks out,
// within 3 s; empty when none came.
std::optional<std::size_t> receive_one(TapLink& link, Frame& buf,
                                       const std::function<bool(std::size_t)>& is_it) {
  const auto deadline = Clock::now() + 3s;
  while (Clock::now() < deadline) {
    pollfd p{link.fd(), POLLIN, 0};
    ::poll(&p, 1, 200);
    for (;;) {
      auto r = link.receive(buf);
      if (!r.ok()) {
        ADD_FAILURE() << r.error();
        return std::nullopt;
      }
      if (*r == 0) break;
      if (is_it(*r)) return *r;
    }
  }
  return std::nullopt;
}

// True when the guest's eth0 (watcher: a vnet packet socket) gets one packet
// of exactly `size` bytes whose byte `protocol_at` is TCP, within 3 s; its
// vnet header lands in `vnet` and its bytes in `in`.
bool guest_gets_whole(int watcher, std::size_t size, std::size_t protocol_at, VnetHeader& vnet, Frame& in) {
  in.assign(70000, 0);
  const auto deadline = Clock::now() + 3s;
  while (Clock::now() < deadline) {
    pollfd p{watcher, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    std::array<iovec, 2> iov = {{{&vnet, sizeof vnet}, {in.data(), in.size()}}};
    const ssize_t n = ::readv(watcher, iov.data(), 2);
    if (n == static_cast<ssize_t>(sizeof vnet + size) && in[protocol_at] == 6) return true;
  }
  return false;
}

void expect_configured(const ScopedNetns& ns, std::size_t mtu) {
  const CommandResult addr = ns.ip("-j addr show eth0");
  ASSERT_EQ(addr.status, 0) << addr.output;
  EXPECT_NE(addr.output.find("\"mtu\":" + std::to_string(mtu) + ","), std::string::npos) << addr.output;
  EXPECT_NE(addr.output.find("\"local\":\"10.0.2.15\",\"prefixlen\":24,\"broadcast\":\"10.0.2.255\""),
            std::string::npos)
      << addr.output;
  EXPECT_NE(addr.output.find("\"UP\""), std::string::npos) << addr.output;
  EXPECT_NE(addr.output.find("\"LOWER_UP\""), std::string::npos) << "no carrier: " << addr.output;
  const CommandResult route = ns.ip("route");
  EXPECT_NE(route.output.find("default via 10.0.2.2 dev eth0"), std::string::npos) << route.output;
  const CommandResult lo = ns.ip("-j link show lo");
  EXPECT_NE(lo.output.find("\"UP\""), std::string::npos) << lo.output;
}

TEST_F(TapLinkTest, CreateConfiguresTheDefaultGuestNetwork) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  expect_configured(ns, 65520);
  EXPECT_EQ(link->mtu(), 65520u);
  EXPECT_EQ(link->max_frame_size(), 65534u);
  EXPECT_EQ(link->ifname(), "eth0");
  EXPECT_EQ(link->netns_path(), ns.path());
  EXPECT_TRUE(::fcntl(link->fd(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(link->fd(), F_GETFD) & FD_CLOEXEC);
}

TEST_F(TapLinkTest, CreateWithMtu1500AndAGuestMac) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  config.guest_mac = Mac{0x02, 0xab, 0xcd, 0x00, 0x00, 0x0f};
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  expect_configured(ns, 1500);
  const CommandResult eth0 = ns.ip("-j link show eth0");
  EXPECT_NE(eth0.output.find("\"address\":\"02:ab:cd:00:00:0f\""), std::string::npos) << eth0.output;
}

TEST_F(TapLinkTest, CreateWithAnIpv6GuestNetwork) {
  ScopedNetns ns(/*quiet=*/false);
  GuestNetConfig config;
  config.guest_address = *policy::IpAddress::parse("fd00:ab::15");
  config.prefix_len = 64;
  config.gateway = *policy::IpAddress::parse("fd00:ab::2");
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  const CommandResult addr = ns.ip("-j -6 addr show eth0");
  EXPECT_NE(addr.output.find("\"local\":\"fd00:ab::15\",\"prefixlen\":64"), std::string::npos) << addr.output;
  const CommandResult route = ns.ip("-6 route");
  EXPECT_NE(route.output.find("default via fd00:ab::2 dev eth0"), std::string::npos) << route.output;
}

TEST_F(TapLinkTest, DestroyingTheLinkRemovesTheTap) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  link.reset();
  EXPECT_NE(ns.ip("link show eth0").status, 0);
}

// What `ping -c1 10.0.2.2` does in the guest, with the test as the gateway:
// the guest's ARP request comes out of the link, our ARP reply goes in, the
// queued echo request comes out addressed to the gateway's MAC, our echo
// reply goes in and reaches the guest's socket. Both directions, end to end.
TEST_F(TapLinkTest, GuestPingsTheGatewayThroughTheLink) {
  ScopedNetns ns(/*quiet=*/false);  // with the guest's IPv6 chatter, as in real life
  const GuestNetConfig config;
  auto link = create(ns, config);
  ASSERT_TRUE(link);

  base::UniqueFd icmp = in_netns(
      ns.path(), [] { return base::UniqueFd(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP)); });
  ASSERT_TRUE(icmp) << "raw ICMP socket in the namespace";
  Frame echo = {8, 0, 0, 0, 0x42, 0x42, 0, 1, 'a', 'b', 'o', 'x', '-', 't', 'a', 'p'};
  const std::uint16_t sum = inet_checksum(echo);
  echo[2] = static_cast<std::uint8_t>(sum >> 8);
  echo[3] = static_cast<std::uint8_t>(sum);
  sockaddr_in gw{};
  gw.sin_family = AF_INET;
  gw.sin_addr.s_addr = htonl(config.gateway.v4_value());
  ASSERT_EQ(::sendto(icmp.get(), echo.data(), echo.size(), 0, reinterpret_cast<sockaddr*>(&gw), sizeof(gw)),
            static_cast<ssize_t>(echo.size()))
      << std::strerror(errno);

  auto arp = wait_frame(
      *link, [&](const Frame& f) { return is_arp_request_for(f, config.gateway); }, 3s);
  ASSERT_TRUE(arp) << "no ARP request for the gateway came out of the link";
  EXPECT_TRUE(bytes_at(*arp, 0, kBroadcast));
  EXPECT_TRUE(bytes_at(*arp, 28, ip4(config.guest_address)));
  const Mac guest_mac = mac_at(*arp, 6);
  ASSERT_TRUE(
      link->send(arp_reply(config.gateway_mac, config.gateway, guest_mac, config.guest_address)).ok());

  auto request = wait_frame(
      *link, [&](const Frame& f) { return is_echo_request_to(f, config.gateway); }, 3s);
  ASSERT_TRUE(request) << "the echo request never followed the ARP reply";
  EXPECT_TRUE(bytes_at(*request, 0, config.gateway_mac)) << "the guest did not take our ARP reply";
  ASSERT_TRUE(link->send(echo_reply(*request, config.gateway_mac)).ok());

  bool answered = false;
  const auto deadline = Clock::now() + 3s;
  while (!answered && Clock::now() < deadline) {
    pollfd p{icmp.get(), POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    std::array<std::uint8_t, 1500> in{};
    const ssize_t n = ::recv(icmp.get(), in.data(), in.size(), 0);
    if (n < 28) continue;
    const std::size_t ihl = (in[0] & 0x0F) * 4u;
    answered = static_cast<std::size_t>(n) >= ihl + 8 && in[ihl] == 0 && in[ihl + 4] == 0x42 &&
               in[ihl + 5] == 0x42 &&
               std::equal(in.begin() + 12, in.begin() + 16, ip4(config.gateway).begin());
  }
  EXPECT_TRUE(answered) << "the guest's socket never got the echo reply";
  EXPECT_GE(link->counters().frames_in, 2u);
  EXPECT_EQ(link->counters().frames_out, 2u);
}

// The vnet header's checksum offload, both ways, with the guest's own UDP
// stack: its datagram to the gateway leaves with the checksum partial (the
// link says so), and the answer we send in three pieces with only the
// pseudo-header sum in its checksum field reaches the guest's socket.
TEST_F(TapLinkTest, ChecksumOffloadBothWaysWithTheGuestsUdp) {
  ScopedNetns ns;
  const GuestNetConfig config;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  EXPECT_TRUE(link->tx_checksum_offload());

  base::UniqueFd udp = in_netns(ns.path(), [] {
    base::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(40001);
    if (fd && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return base::UniqueFd();
    return fd;
  });
  ASSERT_TRUE(udp);
  sockaddr_in gw{};
  gw.sin_family = AF_INET;
  gw.sin_port = htons(9999);
  gw.sin_addr.s_addr = htonl(config.gateway.v4_value());
  const std::string hello = "hello, gateway";
  ASSERT_EQ(::sendto(udp.get(), hello.data(), hello.size(), 0, reinterpret_cast<sockaddr*>(&gw), sizeof gw),
            static_cast<ssize_t>(hello.size()));

  auto arp = wait_frame(
      *link, [&](const Frame& f) { return is_arp_request_for(f, config.gateway); }, 3s);
  ASSERT_TRUE(arp);
  const Mac guest_mac = mac_at(*arp, 6);
  ASSERT_TRUE(
      link->send(arp_reply(config.gateway_mac, config.gateway, guest_mac, config.guest_address)).ok());
  auto datagram = wait_frame(
      *link, [](const Frame& f) { return f.size() >= 42 && get16(f, 12) == kEtherIpv4 && f[23] == 17; }, 3s);
  ASSERT_TRUE(datagram) << "the guest's datagram never came out";
  EXPECT_TRUE(link->last_frame_checksum_trusted()) << "the guest's kernel left the checksum to us";

  // The answer: gateway:9999 -> guest:40001, UDP checksum = pseudo-header sum.
  const std::string answer = "hello, guest; this answer comes in three pieces";
  Frame head;
  put_bytes(head, guest_mac);
  put_bytes(head, config.gateway_mac);
  put16(head, kEtherIpv4);
  const auto ip_len = static_cast<std::uint16_t>(20 + 8 + answer.size());
  const std::array<std::uint8_t, 12> ip_start = {0x45,
                                                 0,
                                                 static_cast<std::uint8_t>(ip_len >> 8),
                                                 static_cast<std::uint8_t>(ip_len),
                                                 0,
                                                 1,
                                                 0x40,
                                                 0,
                                                 64,
                                                 17,
                                                 0,
                                                 0};
  put_bytes(head, ip_start);
  put_bytes(head, ip4(config.gateway));
  put_bytes(head, ip4(config.guest_address));
  const std::uint16_t ip_sum = inet_checksum(std::span(head).subspan(14, 20));
  head[24] = static_cast<std::uint8_t>(ip_sum >> 8);
  head[25] = static_cast<std::uint8_t>(ip_sum);
  const auto udp_len = static_cast<std::uint16_t>(8 + answer.size());
  put16(head, 9999);
  put16(head, 40001);
  put16(head, udp_len);
  std::uint32_t pseudo = 0;
  for (std::size_t i = 26; i < 34; i += 2) pseudo += get16(head, i);
  pseudo += 17 + udp_len;
  while (pseudo >> 16) pseudo = (pseudo & 0xFFFF) + (pseudo >> 16);
  put16(head, static_cast<std::uint16_t>(pseudo));
  const auto* text = reinterpret_cast<const std::uint8_t*>(answer.data());
  const std::array<std::span<const std::uint8_t>, 3> pieces = {
      std::span<const std::uint8_t>(head), std::span<const std::uint8_t>(text, 10),
      std::span<const std::uint8_t>(text + 10, answer.size() - 10)};
  OutFrame out{pieces};
  out.checksum_start = 34;
  out.checksum_offset = 6;
  ASSERT_TRUE(link->send_frame(out).ok());
  EXPECT_EQ(link->counters().dropped_send, 0u);

  pollfd p{udp.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "the guest's socket got nothing";
  std::array<char, 256> in{};
  const ssize_t n = ::recv(udp.get(), in.data(), in.size(), 0);
  EXPECT_EQ(std::string(in.data(), static_cast<std::size_t>(std::max<ssize_t>(n, 0))), answer);
}

// TSO from the guest's kernel: with MTU 1500, a TCP/IPv4 segment of 20,000
// bytes handed to eth0 as one GSO packet (a packet socket with a vnet header
// stands in for the guest's TCP) arrives as one frame, checksum trusted.
TEST_F(TapLinkTest, TsoSegmentFromTheGuestArrivesWhole) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  EXPECT_GE(link->max_receive_size(), 65535u);

  base::UniqueFd sender = vnet_packet_socket(ns, config.ifname, ETH_P_ALL);
  ASSERT_TRUE(sender) << "packet socket with PACKET_VNET_HDR: " << std::strerror(errno);

  Frame f = big_tcp_frame({.dst_mac = config.gateway_mac,
                           .src_mac = Mac{0x02, 0, 0, 0, 0, 0x15},
                           .src_ip = ip4(config.guest_address),
                           .dst_ip = {93, 184, 216, 34},
                           .ip_id = 7,
                           .src_port = 40000,
                           .dst_port = 80,
                           .payload = 20000});
  send_as_gso(sender.get(), f, 1, 54, 1448, 34);

  Frame buf(link->max_receive_size());
  const std::optional<std::size_t> got = receive_one(
      *link, buf, [&](std::size_t n) { return n > 14 + 20 && get16(buf, 12) == kEtherIpv4 && buf[23] == 6; });
  ASSERT_TRUE(got) << "the TSO segment never came out (dropped_oversize " << link->counters().dropped_oversize
                   << ")";
  EXPECT_EQ(*got, f.size()) << "one frame, not segmented";
  EXPECT_TRUE(std::equal(f.begin() + 54, f.end(), buf.begin() + 54)) << "the payload arrives as sent";
  EXPECT_TRUE(link->last_frame_checksum_trusted());
}

// GSO to the guest: a 20,000-byte TCP frame sent with gso_size reaches the
// guest's eth0 as one packet that its kernel knows to be TCPv4 segments of
// gso_size bytes (a packet socket with a vnet header reads it as such).
TEST_F(TapLinkTest, GsoFrameToTheGuestArrivesAsOneTcpPacket) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  ASSERT_TRUE(link->tx_tso());
  base::UniqueFd watcher = vnet_packet_socket(ns, config.ifname, ETH_P_IP);
  ASSERT_TRUE(watcher);

  const Frame f = big_tcp_frame({.dst_mac = Mac{0x02, 0, 0, 0, 0, 0x15},  // a packet socket takes any MAC
                                 .src_mac = config.gateway_mac,
                                 .src_ip = {93, 184, 216, 34},
                                 .dst_ip = ip4(config.guest_address),
                                 .ip_id = 9,
                                 .src_port = 80,
                                 .dst_port = 40000,
                                 .payload = 20000});
  const std::array<std::span<const std::uint8_t>, 2> pieces = {std::span<const std::uint8_t>(f).first(54),
                                                               std::span<const std::uint8_t>(f).subspan(54)};
  OutFrame out{pieces};
  out.checksum_start = 34;
  out.checksum_offset = 16;
  out.gso_size = 1460;
  out.gso_header_size = 54;
  ASSERT_TRUE(link->send_frame(out).ok());
  EXPECT_EQ(link->counters().dropped_send, 0u);
  EXPECT_EQ(link->counters().dropped_oversize, 0u);

  VnetHeader vnet;
  Frame in;
  ASSERT_TRUE(guest_gets_whole(watcher.get(), f.size(), 23, vnet, in))
      << "the guest's eth0 never got the GSO packet whole";
  EXPECT_EQ(vnet.gso_type & 0x7F, 1) << "TCPv4 GSO";
  EXPECT_EQ(vnet.gso_size, 1460);
  EXPECT_TRUE(std::equal(f.begin() + 54, f.end(), in.begin() + 54));
}

// The same over IPv6 (TSO6): a TCP/IPv6 segment of 20,000 bytes handed to
// eth0 as one GSO packet arrives as one frame. Without TUN_F_TSO6 the
// guest's kernel cuts it into MTU-sized segments before the tap.
TEST_F(TapLinkTest, Tso6SegmentFromTheGuestArrivesWhole) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  base::UniqueFd sender = vnet_packet_socket(ns, config.ifname, ETH_P_ALL);
  ASSERT_TRUE(sender) << "packet socket with PACKET_VNET_HDR: " << std::strerror(errno);

  const Frame f = big_tcp6_frame({.dst_mac = config.gateway_mac,
                                  .src_mac = Mac{0x02, 0, 0, 0, 0, 0x15},
                                  .src_ip = {0xfd, 0, 0xab, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x15},
                                  .dst_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80},
                                  .src_port = 40000,
                                  .dst_port = 80,
                                  .payload = 20000});
  send_as_gso(sender.get(), f, 4, 74, 1428, 54);

  Frame buf(link->max_receive_size());
  const std::optional<std::size_t> got = receive_one(*link, buf, [&](std::size_t n) {
    return n > 54 && get16(buf, 12) == kEtherIpv6 && buf[20] == 6 && get16(buf, 54) == 40000;
  });
  ASSERT_TRUE(got) << "the TSO6 segment never came out (dropped_oversize "
                   << link->counters().dropped_oversize << ")";
  EXPECT_EQ(*got, f.size()) << "one frame, not segmented";
  EXPECT_TRUE(std::equal(f.begin() + 74, f.end(), buf.begin() + 74)) << "the payload arrives as sent";
  EXPECT_TRUE(link->last_frame_checksum_trusted());
  EXPECT_EQ(link->counters().dropped_oversize, 0u);
}

// GSO to the guest over IPv6: a 20,000-byte TCP/IPv6 frame sent with
// gso_size and gso_tcp_ipv6 reaches the guest's eth0 as one packet that its
// kernel knows to be TCPv6 segments (VIRTIO_NET_HDR_GSO_TCPV6).
TEST_F(TapLinkTest, Gso6FrameToTheGuestArrivesAsOneTcpPacket) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(ns, config);
  ASSERT_TRUE(link);
  ASSERT_TRUE(link->tx_tso());
  base::UniqueFd watcher = vnet_packet_socket(ns, config.ifname, ETH_P_IPV6);
  ASSERT_TRUE(watcher);

  const Frame f = big_tcp6_frame({.dst_mac = Mac{0x02, 0, 0, 0, 0, 0x15},
                                  .src_mac = config.gateway_mac,
                                  .src_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80},
                                  .dst_ip = {0xfd, 0, 0xab, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x15},
                                  .src_port = 80,
                                  .dst_port = 40000,
                                  .payload = 20000});
  const std::array<std::span<const std::uint8_t>, 2> pieces = {std::span<const std::uint8_t>(f).first(74),
                                                               std::span<const std::uint8_t>(f).subspan(74)};
  OutFrame out{pieces};
  out.checksum_start = 54;
  out.checksum_offset = 16;
  out.gso_size = 1440;
  out.gso_header_size = 74;
  out.gso_tcp_ipv6 = true;
  ASSERT_TRUE(link->send_frame(out).ok());
  EXPECT_EQ(link->counters().dropped_send, 0u);
  EXPECT_EQ(link->counters().dropped_oversize, 0u);

  VnetHeader vnet;
  Frame in;
  ASSERT_TRUE(guest_gets_whole(watcher.get(), f.size(), 20, vnet, in))
      << "the guest's eth0 never got the GSO packet whole";
  EXPECT_EQ(vnet.gso_type & 0x7F, 4) << "TCPv6 GSO";
  EXPECT_EQ(vnet.gso_size, 1440);
  EXPECT_TRUE(std::equal(f.begin() + 74, f.end(), in.begin() + 74));
}

TEST_F(TapLinkTest, ShortBufferDropsTheFrameInsteadOfTruncating) {
  auto ns = std::make_unique<ScopedNetns>();
  GuestNetConfig config;
  config.mtu = 1500;
  auto link = create(*ns, config);
  ASSERT_TRUE(link);
  TapPeer peer(std::move(ns), "eth0", config.mtu);
  peer.inject(test_frame(500, 1));
  peer.inject(test_frame(80, 2));
  Frame small(100);
  std::optional<std::size_t> got;
  const auto deadline = Clock::now() + 2s;
  while (!got && Clock::now() < deadline) {
    pollfd p{link->fd(), POLLIN, 0};
    ::poll(&p, 1, 200);
    auto r = link->receive(small);
    ASSERT_TRUE(r.ok());
    if (*r > 0) got = *r;
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, 80u);
  EXPECT_EQ(get16(small, 14), 2);
  EXPECT_EQ(link->counters().dropped_oversize, 1u);
}

TEST_F(TapLinkTest, RuntSendIsDroppedAndCounted) {
  ScopedNetns ns;
  auto link = create(ns);
  ASSERT_TRUE(link);
  const Frame runt(10, 0xff);
  auto r = link->send(runt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), EMSGSIZE) << "dropped and counted; the link is fine";
  EXPECT_FALSE(send_error_ends_link(r.error()));
  EXPECT_EQ(link->counters().dropped_send, 1u);
  EXPECT_EQ(link->counters().frames_out, 0u);
}

TEST_F(TapLinkTest, MissingNamespaceIsAClearError) {
  const std::string name = "abox-tap-test-" + std::to_string(::getpid()) + "-missing";
  auto link = TapLink::create_in_netns(name, GuestNetConfig{});
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(),
            "cannot enter network namespace /run/netns/" + name + ": No such file or directory");
}

TEST_F(TapLinkTest, ExistingInterfaceNameIsRefused) {
  ScopedNetns ns;
  GuestNetConfig config;
  config.ifname = "lo";
  auto link = TapLink::create_in_netns(ns.name(), config);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(), "an interface named lo already exists in " + ns.path());
}

TEST_F(TapLinkTest, AFailedStepIsNamedWithItsErrnoAndLeavesNoTap) {
  ScopedNetns ns;
  // Someone already put a default route in the namespace.
  ASSERT_EQ(ns.ip("link add d0 type veth peer name d1").status, 0);
  ASSERT_EQ(ns.ip("link set d0 up").status, 0);
  ASSERT_EQ(ns.ip("route add default dev d0").status, 0);
  const NsId before = ns_id("/proc/thread-self/ns/net");
  auto link = TapLink::create_in_netns(ns.name(), GuestNetConfig{});
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error(), "cannot add default route via 10.0.2.2 in " + ns.path() + ": File exists");
  EXPECT_NE(ns.ip("link show eth0").status, 0) << "the half-configured tap was left behind";
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
}

TEST_F(TapLinkTest, TheCallersNamespaceIsRestored) {
  const NsId before = ns_id("/proc/thread-self/ns/net");
  ScopedNetns ns;
  {
    auto link = create(ns);
    ASSERT_TRUE(link);
    EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
  }
  GuestNetConfig taken;
  taken.ifname = "lo";  // fails inside the namespace
  EXPECT_FALSE(TapLink::create_in_netns(ns.name(), taken).ok());
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
  ASSERT_TRUE(create(ns));  // eth0 is free again: the first link was destroyed
  EXPECT_EQ(ns_id("/proc/thread-self/ns/net"), before);
}

// A process that sits in a namespace until destroyed: for /proc/PID/ns/net.
class ProcessInNetns {
 public:
  explicit ProcessInNetns(const std::string& path) {
    int ready[2];
    int hold[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(hold[1]);
      const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) ::_exit(1);
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      while (::read(hold[0], &c, 1) > 0) {
      }  // until the parent closes its end
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(hold[0]);
    hold_.reset(hold[1]);
    char c = 0;
    ready_ = pid_ > 0 && ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
  }
  ~ProcessInNetns() { stop(); }
  ProcessInNetns(const ProcessInNetns&) = delete;
  ProcessInNetns& operator=(const ProcessInNetns&) = delete;
  ProcessInNetns(ProcessInNetns&&) = delete;
  ProcessInNetns& operator=(ProcessInNetns&&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  void stop() {
    hold_.reset();
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  base::UniqueFd hold_;
  bool ready_ = false;
};

TEST_F(TapLinkTest, ProcPidPathWorksAndItsExitEndsTheNamespace) {
  ScopedNetns ns;
  ProcessInNetns process(ns.path());
  ASSERT_TRUE(process.ready());
  const std::string path = "/proc/" + std::to_string(process.pid()) + "/ns/net";
  auto link = TapLink::create_in_netns(path, GuestNetConfig{});
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ((*link)->netns_path(), path);
  expect_configured(ns, 65520);
  EXPECT_TRUE((*link)->netns_alive());
  process.stop();
  EXPECT_FALSE((*link)->netns_alive());
}

TEST_F(TapLinkTest, NetnsAliveFollowsTheNamedNamespace) {
  auto ns = std::make_unique<ScopedNetns>();
  const std::string name = ns->name();
  auto link = create(*ns);
  ASSERT_TRUE(link);
  EXPECT_TRUE(link->netns_alive());
  ns->remove();
  EXPECT_FALSE(link->netns_alive());
  // The tap itself goes on working: the kernel keeps the namespace while the
  // tap is open. That is why netns_alive() exists.
  Frame buf(link->max_frame_size());
  EXPECT_TRUE(link->receive(buf).ok());
  // A new namespace under the same name is not ours.
  ASSERT_EQ(run("ip netns add " + name).status, 0);
  EXPECT_FALSE(link->netns_alive());
  run("ip netns del " + name);
}

TEST_F(TapLinkTest, FromFdWrapsAnOpenTap) {
  ScopedNetns ns;
  base::UniqueFd tap = open_tap_in(ns.path(), "abox0", IFF_TAP | IFF_NO_PI);
  ASSERT_TRUE(tap);
  EXPECT_FALSE(::fcntl(tap.get(), F_GETFL) & O_NONBLOCK);
  const int raw = tap.get();
  auto link = TapLink::from_fd(std::move(tap), 1500);
  ASSERT_TRUE(link.ok()) << link.error();
  EXPECT_EQ((*link)->fd(), raw);
  EXPECT_TRUE(::fcntl(raw, F_GETFL) & O_NONBLOCK);
  EXPECT_EQ((*link)->ifname(), "abox0");
  EXPECT_EQ((*link)->mtu(), 1500u);
  EXPECT_TRUE((*link)->netns_path().empty());
  EXPECT_TRUE((*link)->netns_alive());
  Frame buf((*link)->max_frame_size());
  auto r = (*link)->receive(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);  // non-blocking: nothing there, no hang
}

TEST_F(TapLinkTest, FromFdRefusesWhatIsNotAPlainTap) {
  base::UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  const std::string null_name = "tap fd " + std::to_string(null.get());
  auto not_tap = TapLink::from_fd(std::move(null), 1500);
  ASSERT_FALSE(not_tap.ok());
  EXPECT_EQ(not_tap.error(),
            null_name + " is not an attached tap device (TUNGETIFF): Inappropriate ioctl for device");

  base::UniqueFd detached(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(detached);
  auto not_attached = TapLink::from_fd(std::move(detached), 1500);
  ASSERT_FALSE(not_attached.ok());
  EXPECT_NE(not_attached.error().find("is not an attached tap device"), std::string::npos)
      << not_attached.error();

  ScopedNetns ns;
  base::UniqueFd tun = open_tap_in(ns.path(), "tun0", IFF_TUN | IFF_NO_PI);
  ASSERT_TRUE(tun);
  auto is_tun = TapLink::from_fd(std::move(tun), 1500);
  ASSERT_FALSE(is_tun.ok());
  EXPECT_NE(is_tun.error().find("is a tun device"), std::string::npos) << is_tun.error();

  // (A tap opened without IFF_NO_PI cannot be told apart: TUNGETIFF sets
  // IFF_NOFILTER, the same bit, when no filter is attached.)

  base::UniqueFd with_vnet = open_tap_in(ns.path(), "tap2", IFF_TAP | IFF_NO_PI | IFF_VNET_HDR);
  ASSERT_TRUE(with_vnet);
  auto vnet = TapLink::from_fd(std::move(with_vnet), 1500);
  ASSERT_FALSE(vnet.ok());
  EXPECT_NE(vnet.error().find("IFF_VNET_HDR"), std::string::npos) << vnet.error();

  EXPECT_FALSE(TapLink::from_fd(base::UniqueFd(), 1500).ok());
}

// Checked before anything touches a namespace, so no root needed.
TEST(TapLinkConfigTest, BadGuestNetworksAreRefusedClearly) {
  struct Case {
    std::function<void(GuestNetConfig&)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](GuestNetConfig& c) { c.gateway = *policy::IpAddress::parse("10.0.3.2"); },
       "bad guest network: gateway 10.0.3.2 is not inside 10.0.2.15/24"},
      {[](GuestNetConfig& c) { c.gateway = c.guest_address; },
       "bad guest network: gateway 10.0.2.15 is the guest's own address"},
      {[](GuestNetConfig& c) { c.prefix_len = 33; },
       "bad guest network: prefix length of 10.0.2.15/33 must be 1..32"},
      {[](GuestNetConfig& c) { c.mtu = 65522; }, "bad guest network: MTU 65522 is outside 68..65521"},
      {[](GuestNetConfig& c) { c.mtu = 67; }, "bad guest network: MTU 67 is outside 68..65521"},
      {[](GuestNetConfig& c) { c.ifname = "a-very-long-name"; },
       "bad guest network: interface name 'a-very-long-name' must be 1 to 15 characters"},
      {[](GuestNetConfig& c) { c.ifname = "eth/0"; },
       "bad guest network: interface name 'eth/0' may not contain '/', ':', '%' or blanks"},
      {[](GuestNetConfig& c) { c.gateway = *policy::IpAddress::parse("fd00::2"); },
       "bad guest network: guest address 10.0.2.15 and gateway fd00::2 are of different address families"},
  };
  for (const Case& c : cases) {
    GuestNetConfig config;
    c.change(config);
    auto link = TapLink::create_in_netns("never-opened", config);
    ASSERT_FALSE(link.ok());
    EXPECT_EQ(link.error(), c.error);
  }
}

TEST(TapLinkConfigTest, PathsThatAreNotNetworkNamespacesAreRefused) {
  auto file = TapLink::create_in_netns("/dev/null", GuestNetConfig{});
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error(), "cannot enter network namespace /dev/null: not a namespace file");
  auto uts = TapLink::create_in_netns("/proc/self/ns/uts", GuestNetConfig{});
  ASSERT_FALSE(uts.ok());
  EXPECT_EQ(uts.error(), "cannot enter network namespace /proc/self/ns/uts: not a network namespace");
  auto empty = TapLink::create_in_netns("", GuestNetConfig{});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error(), "network namespace name is empty");
}

}  // namespace
}  // namespace abox::netstack
