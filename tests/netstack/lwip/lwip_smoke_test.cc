// Smoke test for abox's lwIP build (netstack/lwip): accept-all for TCP and UDP,
// the SYN verdict, ICMP only for the gateway, and lwIP's timers; for IPv6,
// accept-all, lwIP's ND resolving the guest, ICMPv6 only for the gateway's
// addresses and no RS, DAD or MLD of lwIP's own.
//
// In-process, no tap: a netif whose linkoutput captures frames into a vector.
// The test plays the guest (10.0.2.15, its own MAC) talking to the gateway
// (10.0.2.2/24, lwIP's netif) and feeds hand-built Ethernet frames with correct
// checksums into netif->input. lwIP is global state: it is initialised once per
// process, each test starts from lwip_test_state.h's reset (then its fake clock
// and fixed random source, given back at the end), and every test leaves no
// pcb and no netif behind.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/byte_reader.h"
#include "lwip/etharp.h"
#include "lwip/ethip6.h"
#include "lwip/init.h"
#include "lwip/ip4_addr.h"
#include "lwip/nd6.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "lwip/timeouts.h"
#include "lwip/udp.h"
#include "netif/ethernet.h"
#include "netstack/lwip/abox_lwip.h"
#include "tests/netstack/lwip/lwip_test_state.h"

namespace abox::netstack {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Mac = std::array<std::uint8_t, 6>;
using Ip4 = std::array<std::uint8_t, 4>;

constexpr Mac kGatewayMac{0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
constexpr Mac kGuestMac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
constexpr Mac kBroadcastMac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr Ip4 kGateway{10, 0, 2, 2};
constexpr Ip4 kGuest{10, 0, 2, 15};

constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint16_t kEtherArp = 0x0806;
constexpr std::uint8_t kProtoIcmp = 1;
constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kProtoUdp = 17;

constexpr std::uint8_t kSyn = 0x02;
constexpr std::uint8_t kRst = 0x04;
constexpr std::uint8_t kPsh = 0x08;
constexpr std::uint8_t kAck = 0x10;

std::string ToString(const Ip4& ip) {
  return std::to_string(ip[0]) + "." + std::to_string(ip[1]) + "." + std::to_string(ip[2]) + "." +
         std::to_string(ip[3]);
}

// lwIP is built dual stack (ip_addr_t holds either family).
std::string ToString(const ip_addr_t* ip) {
  std::array<char, IPADDR_STRLEN_MAX> text{};
  return ipaddr_ntoa_r(ip, text.data(), static_cast<int>(text.size()));
}

ip_addr_t ToLwip(const Ip4& ip) {
  ip_addr_t out{};
  EXPECT_EQ(ipaddr_aton(ToString(ip).c_str(), &out), 1);
  return out;
}

std::string ToString(std::span<const std::uint8_t> bytes) {
  return {bytes.begin(), bytes.end()};
}

Bytes ToBytes(std::string_view text) {
  return {text.begin(), text.end()};
}

// ---- building frames ---------------------------------------------------------

void Put16(Bytes& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

void Put32(Bytes& out, std::uint32_t v) {
  Put16(out, static_cast<std::uint16_t>(v >> 16));
  Put16(out, static_cast<std::uint16_t>(v));
}

void Append(Bytes& out, std::span<const std::uint8_t> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// RFC 1071: the ones' complement of the ones' complement sum of 16-bit words.
std::uint16_t InternetChecksum(std::span<const std::uint8_t> bytes) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < bytes.size(); i += 2) {
    const std::uint32_t low = i + 1 < bytes.size() ? bytes[i + 1] : 0;
    sum += (std::uint32_t{bytes[i]} << 8) | low;
  }
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// The TCP/UDP checksum: over the pseudo-header and the whole segment.
std::uint16_t TransportChecksum(const Ip4& src, const Ip4& dst, std::uint8_t proto,
                                std::span<const std::uint8_t> segment) {
  Bytes pseudo;
  Append(pseudo, src);
  Append(pseudo, dst);
  pseudo.push_back(0);
  pseudo.push_back(proto);
  Put16(pseudo, static_cast<std::uint16_t>(segment.size()));
  Append(pseudo, segment);
  return InternetChecksum(pseudo);
}

Bytes Ethernet(const Mac& dst, const Mac& src, std::uint16_t type, std::span<const std::uint8_t> payload) {
  Bytes frame;
  Append(frame, dst);
  Append(frame, src);
  Put16(frame, type);
  Append(frame, payload);
  return frame;
}

// An IPv4 packet (no options, DF) from the guest, in an Ethernet frame to the gateway's MAC.
Bytes Ipv4Frame(const Ip4& src, const Ip4& dst, std::uint8_t proto, std::span<const std::uint8_t> payload) {
  Bytes ip;
  ip.push_back(0x45);  // version 4, 5 words
  ip.push_back(0);
  Put16(ip, static_cast<std::uint16_t>(20 + payload.size()));
  Put16(ip, 0x1234);  // identification
  Put16(ip, 0x4000);  // DF
  ip.push_back(64);   // TTL
  ip.push_back(proto);
  Put16(ip, 0);  // checksum, below
  Append(ip, src);
  Append(ip, dst);
  const std::uint16_t checksum = InternetChecksum(std::span(ip).first(20));
  ip[10] = static_cast<std::uint8_t>(checksum >> 8);
  ip[11] = static_cast<std::uint8_t>(checksum);
  Append(ip, payload);
  return Ethernet(kGatewayMac, kGuestMac, kEtherIpv4, ip);
}

struct TcpSegment {
  Ip4 src = kGuest;
  Ip4 dst;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint8_t flags = 0;
  std::uint16_t window = 64240;
  Bytes options;  // a multiple of 4 bytes
  Bytes payload;
};

TcpSegment Segment(const Ip4& dst, std::uint16_t src_port, std::uint16_t dst_port, std::uint32_t seq,
                   std::uint32_t ack, std::uint8_t flags) {
  TcpSegment s;
  s.dst = dst;
  s.src_port = src_port;
  s.dst_port = dst_port;
  s.seq = seq;
  s.ack = ack;
  s.flags = flags;
  return s;
}

Bytes TcpFrame(const TcpSegment& s) {
  Bytes tcp;
  Put16(tcp, s.src_port);
  Put16(tcp, s.dst_port);
  Put32(tcp, s.seq);
  Put32(tcp, s.ack);
  tcp.push_back(static_cast<std::uint8_t>(((20 + s.options.size()) / 4) << 4));
  tcp.push_back(s.flags);
  Put16(tcp, s.window);
  Put16(tcp, 0);  // checksum, below
  Put16(tcp, 0);  // urgent pointer
  Append(tcp, s.options);
  Append(tcp, s.payload);
  const std::uint16_t checksum = TransportChecksum(s.src, s.dst, kProtoTcp, tcp);
  tcp[16] = static_cast<std::uint8_t>(checksum >> 8);
  tcp[17] = static_cast<std::uint8_t>(checksum);
  return Ipv4Frame(s.src, s.dst, kProtoTcp, tcp);
}

// What a Linux guest puts in its SYN: MSS 1460, NOP, window scale 7.
const Bytes kSynOptions{0x02, 0x04, 0x05, 0xb4, 0x01, 0x03, 0x03, 0x07};

Bytes UdpFrame(const Ip4& src, std::uint16_t src_port, const Ip4& dst, std::uint16_t dst_port,
               std::span<const std::uint8_t> payload) {
  Bytes udp;
  Put16(udp, src_port);
  Put16(udp, dst_port);
  Put16(udp, static_cast<std::uint16_t>(8 + payload.size()));
  Put16(udp, 0);  // checksum, below
  Append(udp, payload);
  const std::uint16_t checksum = TransportChecksum(src, dst, kProtoUdp, udp);
  udp[6] = static_cast<std::uint8_t>(checksum >> 8);
  udp[7] = static_cast<std::uint8_t>(checksum);
  return Ipv4Frame(src, dst, kProtoUdp, udp);
}

Bytes IcmpEchoFrame(const Ip4& dst) {
  Bytes icmp{8, 0, 0, 0, 0x12, 0x34, 0x00, 0x01, 'a', 'b', 'o', 'x'};
  const std::uint16_t checksum = InternetChecksum(icmp);
  icmp[2] = static_cast<std::uint8_t>(checksum >> 8);
  icmp[3] = static_cast<std::uint8_t>(checksum);
  return Ipv4Frame(kGuest, dst, kProtoIcmp, icmp);
}

// "Who has 10.0.2.2? Tell 10.0.2.15", as the guest asks before its first packet.
Bytes GuestArpRequest() {
  Bytes arp;
  Put16(arp, 1);       // Ethernet
  Put16(arp, 0x0800);  // IPv4
  arp.push_back(6);
  arp.push_back(4);
  Put16(arp, 1);  // request
  Append(arp, kGuestMac);
  Append(arp, kGuest);
  Append(arp, Mac{});
  Append(arp, kGateway);
  return Ethernet(kBroadcastMac, kGuestMac, kEtherArp, arp);
}

// ---- reading what lwIP sends ---------------------------------------------------

struct ParsedIp {
  Mac eth_dst{};
  Mac eth_src{};
  Ip4 src{};
  Ip4 dst{};
  std::uint8_t proto = 0;
  bool header_checksum_ok = false;
  Bytes payload;
};

std::optional<Ip4> ReadIp4(base::ByteReader& r) {
  auto b = r.bytes(4);
  if (!b) return std::nullopt;
  return Ip4{(*b)[0], (*b)[1], (*b)[2], (*b)[3]};
}

std::optional<ParsedIp> ParseIpv4Frame(const Bytes& frame) {
  base::ByteReader r(frame);
  ParsedIp out;
  auto dst = r.bytes(6);
  auto src = r.bytes(6);
  auto type = r.u16be();
  if (!dst || !src || type != kEtherIpv4) return std::nullopt;
  std::memcpy(out.eth_dst.data(), dst->data(), 6);
  std::memcpy(out.eth_src.data(), src->data(), 6);
  const std::span<const std::uint8_t> ip = r.rest();
  auto version_ihl = r.u8();
  if (version_ihl != 0x45 || !r.skip(1)) return std::nullopt;  // lwIP sends no IP options
  auto total = r.u16be();
  if (!total || !r.skip(5)) return std::nullopt;
  auto proto = r.u8();
  if (!proto || !r.skip(2)) return std::nullopt;
  auto ip_src = ReadIp4(r);
  auto ip_dst = ReadIp4(r);
  if (!ip_src || !ip_dst || *total < 20 || *total > ip.size()) return std::nullopt;
  auto payload = r.bytes(*total - 20u);
  if (!payload) return std::nullopt;
  out.src = *ip_src;
  out.dst = *ip_dst;
  out.proto = *proto;
  out.header_checksum_ok = InternetChecksum(ip.first(20)) == 0;
  out.payload.assign(payload->begin(), payload->end());
  return out;
}

struct ParsedTcp {
  ParsedIp ip;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint8_t flags = 0;
  std::optional<std::uint16_t> mss;
  std::optional<std::uint8_t> window_scale;
  bool checksum_ok = false;
  Bytes payload;
};

std::optional<ParsedTcp> ParseTcpFrame(const Bytes& frame) {
  auto ip = ParseIpv4Frame(frame);
  if (!ip || ip->proto != kProtoTcp) return std::nullopt;
  ParsedTcp out;
  base::ByteReader r(ip->payload);
  auto src_port = r.u16be();
  auto dst_port = r.u16be();
  auto seq = r.u32be();
  auto ack = r.u32be();
  auto offset = r.u8();
  auto flags = r.u8();
  if (!src_port || !dst_port || !seq || !ack || !offset || !flags || !r.skip(6)) return std::nullopt;
  const std::size_t header_len = (*offset >> 4) * 4u;
  if (header_len < 20) return std::nullopt;
  auto options = r.bytes(header_len - 20);
  if (!options) return std::nullopt;
  base::ByteReader opt(*options);
  while (auto kind = opt.u8()) {
    if (*kind == 0) break;     // end of options
    if (*kind == 1) continue;  // NOP
    auto len = opt.u8();
    if (!len || *len < 2) return std::nullopt;
    auto body = opt.bytes(*len - 2u);
    if (!body) return std::nullopt;
    base::ByteReader value(*body);
    if (*kind == 2) out.mss = value.u16be();
    if (*kind == 3) out.window_scale = value.u8();
  }
  out.src_port = *src_port;
  out.dst_port = *dst_port;
  out.seq = *seq;
  out.ack = *ack;
  out.flags = *flags;
  out.checksum_ok = TransportChecksum(ip->src, ip->dst, kProtoTcp, ip->payload) == 0;
  out.payload.assign(r.rest().begin(), r.rest().end());
  out.ip = std::move(*ip);
  return out;
}

struct ParsedUdp {
  ParsedIp ip;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  bool checksum_ok = false;
  Bytes payload;
};

std::optional<ParsedUdp> ParseUdpFrame(const Bytes& frame) {
  auto ip = ParseIpv4Frame(frame);
  if (!ip || ip->proto != kProtoUdp) return std::nullopt;
  ParsedUdp out;
  base::ByteReader r(ip->payload);
  auto src_port = r.u16be();
  auto dst_port = r.u16be();
  auto length = r.u16be();
  if (!src_port || !dst_port || !length || !r.skip(2) || *length != ip->payload.size()) return std::nullopt;
  out.src_port = *src_port;
  out.dst_port = *dst_port;
  out.checksum_ok = TransportChecksum(ip->src, ip->dst, kProtoUdp, ip->payload) == 0;
  out.payload.assign(r.rest().begin(), r.rest().end());
  out.ip = std::move(*ip);
  return out;
}

// ---- lwIP, once per process -----------------------------------------------------

std::uint32_t g_now_ms = 1'000'000;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

u32_t FakeClock() {
  return g_now_ms;
}
u32_t FixedRandom() {
  return 0x5eed;
}

// Whatever ran before in this process (a GuestStack test, on the real
// clock), then this test's fake clock and fixed random source.
void ResetLwip() {
  lwip_test::reset_lwip_state();
  abox_lwip_set_rand(&FixedRandom);
  abox_lwip_set_clock(&FakeClock);
}

// ---- the fixture ---------------------------------------------------------------------

struct Accepted {
  tcp_pcb* pcb = nullptr;
  const tcp_pcb_listen* listener = nullptr;
  std::string local_ip;
  std::uint16_t local_port = 0;
  std::string remote_ip;
  std::uint16_t remote_port = 0;
  std::string received;
};

struct SynSeen {
  std::string src;
  std::uint16_t src_port = 0;
  std::string dst;
  std::uint16_t dst_port = 0;
};

struct DatagramSeen {
  udp_pcb* pcb = nullptr;
  std::string src;
  std::uint16_t src_port = 0;
  std::string dst;
  std::uint16_t dst_port = 0;
  std::string payload;
};

class LwipSmokeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ResetLwip();
    const ip_addr_t address_any = ToLwip(kGateway);
    const ip_addr_t netmask_any = ToLwip({255, 255, 255, 0});
    const ip_addr_t no_gateway_any = ToLwip({0, 0, 0, 0});
    const ip4_addr_t address = *ip_2_ip4(&address_any);
    const ip4_addr_t netmask = *ip_2_ip4(&netmask_any);
    const ip4_addr_t no_gateway = *ip_2_ip4(&no_gateway_any);
    ASSERT_NE(netif_add(&netif_, &address, &netmask, &no_gateway, this, &NetifInit, &ethernet_input),
              nullptr);
    netif_set_default(&netif_);
    netif_set_up(&netif_);
    netif_set_link_up(&netif_);
    // Going up, lwIP announces its address (gratuitous ARP); nothing else.
    for (const Bytes& frame : TakeSent()) {
      ASSERT_GE(frame.size(), 14u);
      EXPECT_EQ((frame[12] << 8) | frame[13], kEtherArp);
    }
  }

  void TearDown() override {
    abox_lwip_set_syn_hook(nullptr);
    while (tcp_active_pcbs != nullptr) tcp_abort(tcp_active_pcbs);
    while (tcp_tw_pcbs != nullptr) tcp_abort(tcp_tw_pcbs);
    for (tcp_pcb* listener : listeners_) EXPECT_EQ(tcp_close(listener), ERR_OK);
    for (udp_pcb* pcb : udp_pcbs_) udp_remove(pcb);
    netif_remove(&netif_);
    EXPECT_EQ(tcp_listen_pcbs.listen_pcbs, nullptr);
    EXPECT_EQ(tcp_bound_pcbs, nullptr);
    // The next test of this process may be a GuestStack's, on the real clock.
    abox_lwip_set_clock(nullptr);
    abox_lwip_set_rand(nullptr);
  }

  static err_t NetifInit(netif* n) {
    n->name[0] = 'a';
    n->name[1] = 'b';
    n->mtu = 1500;
    n->hwaddr_len = 6;
    std::memcpy(n->hwaddr, kGatewayMac.data(), kGatewayMac.size());
    n->flags = NETIF_FLAG_BROADCAST | NETIF_FLAG_ETHARP | NETIF_FLAG_ETHERNET;
    n->output = etharp_output;
    n->output_ip6 = ethip6_output;
    n->linkoutput = &LinkOutput;
    return ERR_OK;
  }

  static err_t LinkOutput(netif* n, pbuf* p) {
    auto* self = static_cast<LwipSmokeTest*>(n->state);
    Bytes frame(p->tot_len);
    EXPECT_EQ(pbuf_copy_partial(p, frame.data(), p->tot_len, 0), p->tot_len);
    self->sent_.push_back(std::move(frame));
    return ERR_OK;
  }

  // Hands one frame to lwIP, as the driver will.
  void Feed(const Bytes& frame) {
    pbuf* p = pbuf_alloc(PBUF_RAW, static_cast<u16_t>(frame.size()), PBUF_RAM);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(pbuf_take(p, frame.data(), static_cast<u16_t>(frame.size())), ERR_OK);
    if (netif_.input(p, &netif_) != ERR_OK) pbuf_free(p);
  }

  std::vector<Bytes> TakeSent() { return std::exchange(sent_, {}); }

  // The guest resolves the gateway: lwIP answers and learns the guest's MAC,
  // which it needs to send anything back.
  void GuestArps() {
    Feed(GuestArpRequest());
    const std::vector<Bytes> sent = TakeSent();
    ASSERT_EQ(sent.size(), 1u);
    ASSERT_GE(sent[0].size(), 14u);
    EXPECT_TRUE(std::equal(kGuestMac.begin(), kGuestMac.end(), sent[0].begin()));  // the reply
  }

  tcp_pcb* AcceptAllListener() {
    tcp_pcb* pcb = tcp_new();
    EXPECT_NE(pcb, nullptr);
    ip_set_option(pcb, SOF_ABOX_ACCEPT_ALL);
    tcp_pcb* listener = tcp_listen(pcb);  // unbound: IP_ANY, port 0
    EXPECT_NE(listener, nullptr);
    tcp_arg(listener, this);
    tcp_accept(listener, &OnAccept);
    listeners_.push_back(listener);
    return listener;
  }

  udp_pcb* AcceptAllUdp() {
    udp_pcb* pcb = NewUdp();
    ip_set_option(pcb, SOF_ABOX_ACCEPT_ALL);
    EXPECT_EQ(udp_bind(pcb, IP4_ADDR_ANY, 0), ERR_OK);  // any free port; the flag does the rest
    return pcb;
  }

  udp_pcb* NewUdp() {
    udp_pcb* pcb = udp_new();
    EXPECT_NE(pcb, nullptr);
    udp_recv(pcb, &OnDatagram, this);
    udp_pcbs_.push_back(pcb);
    return pcb;
  }

  // Sends the guest's SYN and returns lwIP's only answer, parsed.
  std::optional<ParsedTcp> Syn(const Ip4& dst, std::uint16_t src_port, std::uint16_t dst_port,
                               std::uint32_t isn) {
    TcpSegment syn = Segment(dst, src_port, dst_port, isn, 0, kSyn);
    syn.options = kSynOptions;
    Feed(TcpFrame(syn));
    std::vector<Bytes> sent = TakeSent();
    if (sent.size() != 1) {
      ADD_FAILURE() << "expected one answer to the SYN, got " << sent.size();
      return std::nullopt;
    }
    return ParseTcpFrame(sent[0]);
  }

  // Completes a handshake to dst:dst_port; returns the SYN-ACK.
  std::optional<ParsedTcp> Connect(const Ip4& dst, std::uint16_t src_port, std::uint16_t dst_port,
                                   std::uint32_t isn) {
    auto syn_ack = Syn(dst, src_port, dst_port, isn);
    if (!syn_ack || syn_ack->flags != (kSyn | kAck)) {
      ADD_FAILURE() << "no SYN-ACK";
      return std::nullopt;
    }
    Feed(TcpFrame(Segment(dst, src_port, dst_port, isn + 1, syn_ack->seq + 1, kAck)));
    EXPECT_TRUE(TakeSent().empty());  // nothing to say to a bare ACK
    return syn_ack;
  }

  static err_t OnAccept(void* arg, tcp_pcb* pcb, err_t err) {
    auto* self = static_cast<LwipSmokeTest*>(arg);
    EXPECT_EQ(err, ERR_OK);
    Accepted& a = self->accepted_.emplace_back();
    a.pcb = pcb;
    a.listener = pcb->listener;
    a.local_ip = ToString(&pcb->local_ip);
    a.local_port = pcb->local_port;
    a.remote_ip = ToString(&pcb->remote_ip);
    a.remote_port = pcb->remote_port;
    tcp_recv(pcb, &OnReceive);
    return ERR_OK;
  }

  static err_t OnReceive(void* arg, tcp_pcb* pcb, pbuf* p, err_t err) {
    auto* self = static_cast<LwipSmokeTest*>(arg);
    EXPECT_EQ(err, ERR_OK);
    if (p == nullptr) return ERR_OK;  // the guest's FIN
    for (Accepted& a : self->accepted_) {
      if (a.pcb != pcb) continue;
      std::string chunk(p->tot_len, '\0');
      pbuf_copy_partial(p, chunk.data(), p->tot_len, 0);
      a.received += chunk;
    }
    tcp_recved(pcb, p->tot_len);
    pbuf_free(p);
    return ERR_OK;
  }

  static abox_lwip_syn_verdict_t OnSyn(void* listener_arg, const ip_addr_t* src, u16_t src_port,
                                       const ip_addr_t* dst, u16_t dst_port) {
    auto* self = static_cast<LwipSmokeTest*>(listener_arg);
    self->syns_.push_back({ToString(src), src_port, ToString(dst), dst_port});
    return self->verdict_;
  }

  static void OnDatagram(void* arg, udp_pcb* pcb, pbuf* p, const ip_addr_t* addr, u16_t port) {
    auto* self = static_cast<LwipSmokeTest*>(arg);
    std::string payload(p->tot_len, '\0');
    pbuf_copy_partial(p, payload.data(), p->tot_len, 0);
    DatagramSeen& d = self->datagrams_.emplace_back();
    d.pcb = pcb;
    d.src = ToString(addr);
    d.src_port = port;
    d.dst = ToString(ip_current_dest_addr());
    d.dst_port = abox_lwip_udp_current_dest_port();
    d.payload = payload;
    pbuf_free(p);
  }

  netif netif_{};
  std::vector<Bytes> sent_;
  std::vector<tcp_pcb*> listeners_;
  std::vector<udp_pcb*> udp_pcbs_;
  std::vector<Accepted> accepted_;
  std::vector<SynSeen> syns_;
  std::vector<DatagramSeen> datagrams_;
  abox_lwip_syn_verdict_t verdict_ = ABOX_LWIP_SYN_ACCEPT;
};

// (a) A SYN to a foreign address and port is answered from that address and
// port, and the accepted pcb's local end is the original destination.
TEST_F(LwipSmokeTest, TcpToAnyDestinationIsAcceptedAsThatDestination) {
  AcceptAllListener();
  abox_lwip_set_syn_hook(&OnSyn);
  GuestArps();
  const Ip4 example{93, 184, 215, 14};

  auto syn_ack = Syn(example, 40000, 443, 1000);
  ASSERT_TRUE(syn_ack);
  EXPECT_EQ(syn_ack->ip.eth_src, kGatewayMac);
  EXPECT_EQ(syn_ack->ip.eth_dst, kGuestMac);
  EXPECT_EQ(ToString(syn_ack->ip.src), "93.184.215.14");
  EXPECT_EQ(ToString(syn_ack->ip.dst), "10.0.2.15");
  EXPECT_EQ(syn_ack->src_port, 443);
  EXPECT_EQ(syn_ack->dst_port, 40000);
  EXPECT_EQ(syn_ack->flags, kSyn | kAck);
  EXPECT_EQ(syn_ack->ack, 1001u);
  EXPECT_TRUE(syn_ack->ip.header_checksum_ok);
  EXPECT_TRUE(syn_ack->checksum_ok);
  EXPECT_EQ(syn_ack->mss, 1460);  // min(TCP_MSS 65480, MTU 1500 - 40)
  EXPECT_EQ(syn_ack->window_scale, 7);
  ASSERT_EQ(syns_.size(), 1u);  // asked before the SYN-ACK went out
  EXPECT_EQ(syns_[0].src, "10.0.2.15");
  EXPECT_EQ(syns_[0].src_port, 40000);
  EXPECT_EQ(syns_[0].dst, "93.184.215.14");
  EXPECT_EQ(syns_[0].dst_port, 443);
  EXPECT_TRUE(accepted_.empty());  // lwIP accepts only once the handshake completes

  Feed(TcpFrame(Segment(example, 40000, 443, 1001, syn_ack->seq + 1, kAck)));
  ASSERT_EQ(accepted_.size(), 1u);
  EXPECT_EQ(accepted_[0].local_ip, "93.184.215.14");
  EXPECT_EQ(accepted_[0].local_port, 443);
  EXPECT_EQ(accepted_[0].remote_ip, "10.0.2.15");
  EXPECT_EQ(accepted_[0].remote_port, 40000);

  // Data both ways.
  TcpSegment ping = Segment(example, 40000, 443, 1001, syn_ack->seq + 1, kPsh | kAck);
  ping.payload = ToBytes("ping");
  Feed(TcpFrame(ping));
  EXPECT_EQ(accepted_[0].received, "ping");
  ASSERT_EQ(tcp_write(accepted_[0].pcb, "pong", 4, TCP_WRITE_FLAG_COPY), ERR_OK);
  ASSERT_EQ(tcp_output(accepted_[0].pcb), ERR_OK);
  std::optional<ParsedTcp> pong;
  for (const Bytes& frame : TakeSent()) {
    auto seg = ParseTcpFrame(frame);
    ASSERT_TRUE(seg);
    if (!seg->payload.empty()) pong = seg;
  }
  ASSERT_TRUE(pong);
  EXPECT_EQ(ToString(pong->payload), "pong");
  EXPECT_EQ(ToString(pong->ip.src), "93.184.215.14");
  EXPECT_EQ(pong->src_port, 443);
  EXPECT_EQ(pong->seq, syn_ack->seq + 1);
  EXPECT_EQ(pong->ack, 1005u);
  EXPECT_TRUE(pong->checksum_ok);
}

// lwIP's retransmissions to the guest are counted (accept-all.patch, tcp_out.c:
// lwIP's own statistics are off): three duplicate ACKs resend the first
// unacknowledged segment once (fast retransmit), and with no ACK at all its
// timer resends it; each counter moves by exactly the resends seen.
TEST_F(LwipSmokeTest, RetransmissionsToTheGuestAreCounted) {
  AcceptAllListener();
  GuestArps();
  const Ip4 example{93, 184, 215, 14};
  auto syn_ack = Syn(example, 40010, 443, 5000);
  ASSERT_TRUE(syn_ack);
  Feed(TcpFrame(Segment(example, 40010, 443, 5001, syn_ack->seq + 1, kAck)));
  ASSERT_EQ(accepted_.size(), 1u);
  tcp_pcb* pcb = accepted_[0].pcb;
  tcp_nagle_disable(pcb);  // three segments in flight at once
  const abox_lwip_counters_t before = *abox_lwip_counters();
  const std::uint32_t first = syn_ack->seq + 1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(tcp_write(pcb, "0123456789", 10, TCP_WRITE_FLAG_COPY), ERR_OK);
    ASSERT_EQ(tcp_output(pcb), ERR_OK);
  }
  EXPECT_EQ(TakeSent().size(), 3u);
  EXPECT_EQ(abox_lwip_counters()->tcp_fast_retransmits, before.tcp_fast_retransmits);  // first sends are not

  // The guest got the second and third but not the first: three duplicate
  // ACKs of the first's sequence number.
  std::vector<std::uint32_t> resent;
  for (int i = 0; i < 3; ++i) {
    Feed(TcpFrame(Segment(example, 40010, 443, 5001, first, kAck)));
    for (const Bytes& frame : TakeSent()) {
      auto seg = ParseTcpFrame(frame);
      if (seg && !seg->payload.empty()) resent.push_back(seg->seq);
    }
  }
  EXPECT_EQ(resent, std::vector<std::uint32_t>{first});
  EXPECT_EQ(abox_lwip_counters()->tcp_fast_retransmits, before.tcp_fast_retransmits + 1);
  EXPECT_EQ(abox_lwip_counters()->tcp_retransmit_timeouts, before.tcp_retransmit_timeouts);

  // No ACK at all from here: the retransmission timer resends, once per
  // expiry, up to 10 s.
  resent.clear();
  int resends = 0;
  for (int step = 0; step < 100; ++step) {
    g_now_ms += 100;
    sys_check_timeouts();
    bool any = false;
    for (const Bytes& frame : TakeSent()) {
      auto seg = ParseTcpFrame(frame);
      if (seg && !seg->payload.empty()) {
        any = true;
        resent.push_back(seg->seq);
      }
    }
    if (any) ++resends;
  }
  ASSERT_GE(resends, 1);
  EXPECT_EQ(resent.front(), first);
  EXPECT_EQ(abox_lwip_counters()->tcp_retransmit_timeouts, before.tcp_retransmit_timeouts + resends);
  EXPECT_EQ(abox_lwip_counters()->tcp_fast_retransmits, before.tcp_fast_retransmits + 1);
}

// (b) Two destinations on two ports through the one listener, side by side.
TEST_F(LwipSmokeTest, TcpTwoDestinationsTwoPortsOneListener) {
  AcceptAllListener();
  GuestArps();
  const Ip4 example{93, 184, 215, 14};
  const Ip4 other{192, 0, 2, 33};

  auto first = Connect(example, 40000, 443, 1000);
  auto second = Connect(other, 40001, 22, 5000);
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  EXPECT_EQ(ToString(second->ip.src), "192.0.2.33");
  EXPECT_EQ(second->src_port, 22);
  EXPECT_EQ(second->ack, 5001u);
  EXPECT_TRUE(second->checksum_ok);

  ASSERT_EQ(accepted_.size(), 2u);
  EXPECT_EQ(accepted_[0].local_ip, "93.184.215.14");
  EXPECT_EQ(accepted_[0].local_port, 443);
  EXPECT_EQ(accepted_[1].local_ip, "192.0.2.33");
  EXPECT_EQ(accepted_[1].local_port, 22);
  EXPECT_EQ(accepted_[1].remote_port, 40001);
}

// A listener of our own (the gateway's DNS over TCP) wins over accept-all, and
// the SYN verdict is only asked for accept-all flows.
TEST_F(LwipSmokeTest, TcpOwnListenerWinsOverAcceptAll) {
  tcp_pcb* dns = tcp_new();
  ASSERT_NE(dns, nullptr);
  const ip_addr_t gateway = ToLwip(kGateway);
  ASSERT_EQ(tcp_bind(dns, &gateway, 53), ERR_OK);
  tcp_pcb* dns_listener = tcp_listen(dns);
  ASSERT_NE(dns_listener, nullptr);
  tcp_arg(dns_listener, this);
  tcp_accept(dns_listener, &OnAccept);
  listeners_.push_back(dns_listener);
  AcceptAllListener();  // registered last: lwIP looks at it first
  abox_lwip_set_syn_hook(&OnSyn);
  GuestArps();

  ASSERT_TRUE(Connect(kGateway, 40000, 53, 1000));
  ASSERT_TRUE(Connect({93, 184, 215, 14}, 40001, 53, 2000));  // port 53 elsewhere: accept-all
  ASSERT_TRUE(Connect(kGateway, 40002, 53, 3000));            // accept-all now first in the list

  ASSERT_EQ(accepted_.size(), 3u);
  EXPECT_EQ(accepted_[0].listener, reinterpret_cast<const tcp_pcb_listen*>(dns_listener));
  EXPECT_EQ(accepted_[0].local_ip, "10.0.2.2");
  EXPECT_NE(accepted_[1].listener, reinterpret_cast<const tcp_pcb_listen*>(dns_listener));
  EXPECT_EQ(accepted_[1].local_ip, "93.184.215.14");
  EXPECT_EQ(accepted_[2].listener, reinterpret_cast<const tcp_pcb_listen*>(dns_listener));
  ASSERT_EQ(syns_.size(), 1u);
  EXPECT_EQ(syns_[0].dst, "93.184.215.14");
}

// (d) Verdict "reset": RST+ACK from the destination, no pcb, no accept.
TEST_F(LwipSmokeTest, TcpSynVerdictResetAnswersRstAndAcceptsNothing) {
  AcceptAllListener();
  abox_lwip_set_syn_hook(&OnSyn);
  verdict_ = ABOX_LWIP_SYN_RESET;
  GuestArps();

  auto rst = Syn({93, 184, 215, 14}, 40002, 25, 7000);
  ASSERT_TRUE(rst);
  EXPECT_EQ(rst->flags, kRst | kAck);
  EXPECT_EQ(ToString(rst->ip.src), "93.184.215.14");
  EXPECT_EQ(rst->src_port, 25);
  EXPECT_EQ(rst->dst_port, 40002);
  EXPECT_EQ(rst->seq, 0u);
  EXPECT_EQ(rst->ack, 7001u);
  EXPECT_TRUE(rst->checksum_ok);
  EXPECT_EQ(syns_.size(), 1u);
  EXPECT_EQ(tcp_active_pcbs, nullptr);

  // The guest gives up; nothing was ever accepted.
  EXPECT_TRUE(accepted_.empty());
}

// Verdict "drop": silence, no pcb; the guest's retransmitted SYN is asked again.
TEST_F(LwipSmokeTest, TcpSynVerdictDropSendsNothing) {
  AcceptAllListener();
  abox_lwip_set_syn_hook(&OnSyn);
  verdict_ = ABOX_LWIP_SYN_DROP;
  GuestArps();
  TcpSegment syn = Segment({93, 184, 215, 14}, 40003, 443, 9000, 0, kSyn);
  syn.options = kSynOptions;

  Feed(TcpFrame(syn));
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(tcp_active_pcbs, nullptr);

  verdict_ = ABOX_LWIP_SYN_ACCEPT;  // admitted meanwhile
  Feed(TcpFrame(syn));
  const std::vector<Bytes> sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  auto syn_ack = ParseTcpFrame(sent[0]);
  ASSERT_TRUE(syn_ack);
  EXPECT_EQ(syn_ack->flags, kSyn | kAck);
  EXPECT_EQ(syns_.size(), 2u);
}

// (c) A datagram to any address and port reaches the accept-all pcb with its
// original destination; a pcb bound to that destination answers from it and
// takes the flow's next datagrams.
TEST_F(LwipSmokeTest, UdpToAnyDestinationReachesAcceptAllPcb) {
  udp_pcb* all = AcceptAllUdp();
  GuestArps();
  const Ip4 resolver{198, 51, 100, 7};

  Feed(UdpFrame(kGuest, 40001, resolver, 53, ToBytes("query")));
  EXPECT_TRUE(TakeSent().empty());  // no ICMP port unreachable
  ASSERT_EQ(datagrams_.size(), 1u);
  EXPECT_EQ(datagrams_[0].pcb, all);
  EXPECT_EQ(datagrams_[0].src, "10.0.2.15");
  EXPECT_EQ(datagrams_[0].src_port, 40001);
  EXPECT_EQ(datagrams_[0].dst, "198.51.100.7");
  EXPECT_EQ(datagrams_[0].dst_port, 53);
  EXPECT_EQ(datagrams_[0].payload, "query");

  // The answer comes from the original destination.
  udp_pcb* flow = NewUdp();
  const ip_addr_t local = ToLwip(resolver);
  const ip_addr_t guest = ToLwip(kGuest);
  ASSERT_EQ(udp_bind(flow, &local, 53), ERR_OK);
  pbuf* answer = pbuf_alloc(PBUF_TRANSPORT, 6, PBUF_RAM);
  ASSERT_NE(answer, nullptr);
  ASSERT_EQ(pbuf_take(answer, "answer", 6), ERR_OK);
  EXPECT_EQ(udp_sendto(flow, answer, &guest, 40001), ERR_RTE);  // source is not the netif's address
  ASSERT_EQ(udp_sendto_if_src(flow, answer, &guest, 40001, &netif_, &local), ERR_OK);
  pbuf_free(answer);
  const std::vector<Bytes> sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  auto reply = ParseUdpFrame(sent[0]);
  ASSERT_TRUE(reply);
  EXPECT_EQ(ToString(reply->ip.src), "198.51.100.7");
  EXPECT_EQ(reply->src_port, 53);
  EXPECT_EQ(ToString(reply->ip.dst), "10.0.2.15");
  EXPECT_EQ(reply->dst_port, 40001);
  EXPECT_EQ(ToString(reply->payload), "answer");
  EXPECT_TRUE(reply->ip.header_checksum_ok);
  EXPECT_TRUE(reply->checksum_ok);

  // A bound pcb matches before accept-all.
  Feed(UdpFrame(kGuest, 40001, resolver, 53, ToBytes("again")));
  ASSERT_EQ(datagrams_.size(), 2u);
  EXPECT_EQ(datagrams_[1].pcb, flow);
  EXPECT_EQ(datagrams_[1].dst, "198.51.100.7");

  // Broadcasts are not flows: accept-all does not take them.
  Feed(UdpFrame(kGuest, 40002, {10, 0, 2, 255}, 9999, ToBytes("hello?")));
  EXPECT_EQ(datagrams_.size(), 2u);
  EXPECT_TRUE(TakeSent().empty());
}

// lwIP answers pings to the gateway only; accept-all must not fake
// reachability of every other address.
TEST_F(LwipSmokeTest, IcmpEchoAnsweredForGatewayOnly) {
  GuestArps();
  const std::uint64_t eaten_before = abox_lwip_counters()->icmp_not_for_netif;

  Feed(IcmpEchoFrame(kGateway));
  std::vector<Bytes> sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  auto reply = ParseIpv4Frame(sent[0]);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->proto, kProtoIcmp);
  EXPECT_EQ(ToString(reply->src), "10.0.2.2");
  ASSERT_FALSE(reply->payload.empty());
  EXPECT_EQ(reply->payload[0], 0);  // echo reply
  EXPECT_EQ(InternetChecksum(reply->payload), 0);

  Feed(IcmpEchoFrame({93, 184, 215, 14}));
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(abox_lwip_counters()->icmp_not_for_netif, eaten_before + 1);
}

// lwIP's timers: a half-open flow the guest never completes gets its SYN-ACK
// retransmitted, then is forgotten; nothing crashes along the way.
TEST_F(LwipSmokeTest, TimersRetransmitSynAckThenForgetHalfOpenFlow) {
  AcceptAllListener();
  GuestArps();
  auto syn_ack = Syn({93, 184, 215, 14}, 40004, 443, 3000);
  ASSERT_TRUE(syn_ack);
  ASSERT_NE(tcp_active_pcbs, nullptr);

  int retransmits = 0;
  for (int step = 0; step < 600 && tcp_active_pcbs != nullptr; ++step) {  // up to 60 s
    g_now_ms += 100;
    sys_check_timeouts();
    for (const Bytes& frame : TakeSent()) {
      auto seg = ParseTcpFrame(frame);
      if (!seg) continue;  // lwIP re-resolving the guest's MAC
      EXPECT_EQ(seg->flags, kSyn | kAck);
      EXPECT_EQ(seg->seq, syn_ack->seq);
      EXPECT_TRUE(seg->checksum_ok);
      ++retransmits;
    }
  }
  EXPECT_GE(retransmits, 1);
  EXPECT_EQ(tcp_active_pcbs, nullptr);
  EXPECT_TRUE(accepted_.empty());

  // An idle minute more, with no flows.
  for (int step = 0; step < 600; ++step) {
    g_now_ms += 100;
    sys_check_timeouts();
  }
  TakeSent();
}

// ---- IPv6 (issue 21) -------------------------------------------------------------------

using Ip6 = std::array<std::uint8_t, 16>;
constexpr std::uint16_t kEtherIpv6 = 0x86dd;
constexpr std::uint8_t kProtoIcmp6 = 58;
// The gateway's two addresses, as GuestStack gives them to lwIP: fe80::1 and
// PREFIX::1 of the instance's ULA /64.
constexpr Ip6 kGatewayLinkLocal6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Ip6 kGateway6{0xfd, 0x00, 0xab, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Ip6 kGuest6{0xfd, 0x00, 0xab, 0x0c, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56};
constexpr Ip6 kForeign6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10};  // 2001:db8::10

std::uint16_t Transport6Checksum(const Ip6& src, const Ip6& dst, std::uint8_t proto,
                                 std::span<const std::uint8_t> segment) {
  Bytes pseudo;
  Append(pseudo, src);
  Append(pseudo, dst);
  Put32(pseudo, static_cast<std::uint32_t>(segment.size()));
  Append(pseudo, Bytes{0, 0, 0, proto});
  Append(pseudo, segment);
  return InternetChecksum(pseudo);
}

// An IPv6 packet from the guest whose upper layer's checksum (at
// checksum_offset) is filled in here.
Bytes Ipv6Frame(const Ip6& src, const Ip6& dst, std::uint8_t proto, Bytes upper, std::size_t checksum_offset,
                std::uint8_t hop_limit = 64) {
  const std::uint16_t checksum = Transport6Checksum(src, dst, proto, upper);
  upper[checksum_offset] = static_cast<std::uint8_t>(checksum >> 8);
  upper[checksum_offset + 1] = static_cast<std::uint8_t>(checksum);
  Bytes ip;
  Put32(ip, 0x60000000);
  Put16(ip, static_cast<std::uint16_t>(upper.size()));
  ip.push_back(proto);
  ip.push_back(hop_limit);
  Append(ip, src);
  Append(ip, dst);
  Append(ip, upper);
  return Ethernet(kGatewayMac, kGuestMac, kEtherIpv6, ip);
}

Bytes Tcp6SynFrame(const Ip6& dst, std::uint16_t src_port, std::uint16_t dst_port, std::uint32_t isn) {
  Bytes tcp;
  Put16(tcp, src_port);
  Put16(tcp, dst_port);
  Put32(tcp, isn);
  Put32(tcp, 0);
  tcp.push_back(static_cast<std::uint8_t>(((20 + kSynOptions.size()) / 4) << 4));
  tcp.push_back(kSyn);
  Put16(tcp, 64240);
  Put32(tcp, 0);  // checksum, urgent pointer
  Append(tcp, kSynOptions);
  return Ipv6Frame(kGuest6, dst, kProtoTcp, tcp, 16);
}

Bytes Icmp6EchoFrame(const Ip6& dst) {
  return Ipv6Frame(kGuest6, dst, kProtoIcmp6, Bytes{128, 0, 0, 0, 0x12, 0x34, 0x00, 0x01, 'a', 'b'}, 2);
}

// The guest's answer to a neighbour solicitation for its address.
Bytes GuestNeighbourAdvertisement(const Ip6& to) {
  Bytes na{136, 0, 0, 0, 0x60, 0, 0, 0};  // solicited, override
  Append(na, kGuest6);
  Append(na, Bytes{2, 1});  // target link-layer address
  Append(na, kGuestMac);
  return Ipv6Frame(kGuest6, to, kProtoIcmp6, na, 2, 255);
}

struct ParsedIp6 {
  Mac eth_dst{};
  Ip6 src{};
  Ip6 dst{};
  std::uint8_t next_header = 0;
  Bytes upper;
  bool checksum_ok = false;
};

std::optional<ParsedIp6> ParseIpv6Frame(const Bytes& frame) {
  if (frame.size() < 54 || ((frame[12] << 8) | frame[13]) != kEtherIpv6) return std::nullopt;
  ParsedIp6 out;
  std::copy_n(frame.begin(), 6, out.eth_dst.begin());
  const std::size_t length = (std::size_t{frame[18]} << 8) | frame[19];
  if (frame.size() < 54 + length) return std::nullopt;
  out.next_header = frame[20];
  std::copy_n(frame.begin() + 22, 16, out.src.begin());
  std::copy_n(frame.begin() + 38, 16, out.dst.begin());
  out.upper.assign(frame.begin() + 54, frame.begin() + 54 + static_cast<std::ptrdiff_t>(length));
  out.checksum_ok = Transport6Checksum(out.src, out.dst, out.next_header, out.upper) == 0;
  return out;
}

class LwipIpv6Test : public LwipSmokeTest {
 protected:
  void SetUp() override {
    LwipSmokeTest::SetUp();
    const std::array<const Ip6*, 2> own = {&kGatewayLinkLocal6, &kGateway6};
    for (s8_t i = 0; i < 2; ++i) {
      ip6_addr_t a{};
      std::memcpy(a.addr, own[static_cast<std::size_t>(i)]->data(), 16);
      netif_ip6_addr_set(&netif_, i, &a);
      netif_ip6_addr_set_state(&netif_, i, IP6_ADDR_PREFERRED);
    }
  }
};

// With DAD, SLAAC, RS and MLD off (lwipopts.h), lwIP says nothing of its own
// on IPv6, going up or over a minute of timers.
TEST_F(LwipIpv6Test, LwipSendsNoRouterSolicitationDadOrMldOfItsOwn) {
  netif_set_down(&netif_);
  netif_set_up(&netif_);
  for (int step = 0; step < 600; ++step) {  // 60 s
    g_now_ms += 100;
    sys_check_timeouts();
  }
  for (const Bytes& frame : TakeSent()) {
    ASSERT_GE(frame.size(), 14u);
    EXPECT_NE((frame[12] << 8) | frame[13], kEtherIpv6);
  }
}

// A SYN to a foreign IPv6 address reaches the accept-all listener and the SYN
// hook sees that address; lwIP resolves the guest by a solicitation from
// PREFIX::1, the guest's advertisement back lets the SYN-ACK out, from the
// foreign address, and the handshake completes as that destination.
TEST_F(LwipIpv6Test, TcpToAnyIpv6DestinationAfterNeighbourDiscovery) {
  AcceptAllListener();
  abox_lwip_set_syn_hook(&OnSyn);

  Feed(Tcp6SynFrame(kForeign6, 41000, 443, 9000));
  ASSERT_EQ(syns_.size(), 1u);
  EXPECT_EQ(syns_[0].dst, "2001:DB8::10");
  EXPECT_EQ(syns_[0].dst_port, 443);
  EXPECT_EQ(syns_[0].src, "FD00:AB0C::5054:FF:FE12:3456");

  std::vector<Bytes> sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);  // the SYN-ACK waits in ND's queue
  auto ns = ParseIpv6Frame(sent[0]);
  ASSERT_TRUE(ns);
  EXPECT_EQ(ns->next_header, kProtoIcmp6);
  ASSERT_GE(ns->upper.size(), 24u);
  EXPECT_EQ(ns->upper[0], 135);   // neighbour solicitation
  EXPECT_EQ(ns->src, kGateway6);  // nd6_send_ns(): the netif's address in the target's /64
  EXPECT_EQ(ns->eth_dst, (Mac{0x33, 0x33, 0xff, 0x12, 0x34, 0x56}));  // solicited-node
  EXPECT_TRUE(std::equal(kGuest6.begin(), kGuest6.end(), ns->upper.begin() + 8));
  EXPECT_TRUE(ns->checksum_ok);

  Feed(GuestNeighbourAdvertisement(kGateway6));
  sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  auto syn_ack = ParseIpv6Frame(sent[0]);
  ASSERT_TRUE(syn_ack);
  EXPECT_EQ(syn_ack->eth_dst, kGuestMac);
  EXPECT_EQ(syn_ack->src, kForeign6);
  EXPECT_EQ(syn_ack->dst, kGuest6);
  EXPECT_EQ(syn_ack->next_header, kProtoTcp);
  ASSERT_GE(syn_ack->upper.size(), 20u);
  EXPECT_EQ(syn_ack->upper[13], kSyn | kAck);
  EXPECT_TRUE(syn_ack->checksum_ok);
  const std::uint32_t server_isn = (std::uint32_t{syn_ack->upper[4]} << 24) | (syn_ack->upper[5] << 16) |
                                   (syn_ack->upper[6] << 8) | syn_ack->upper[7];

  Bytes ack;
  Put16(ack, 41000);
  Put16(ack, 443);
  Put32(ack, 9001);
  Put32(ack, server_isn + 1);
  ack.push_back(0x50);
  ack.push_back(kAck);
  Put16(ack, 64240);
  Put32(ack, 0);
  Feed(Ipv6Frame(kGuest6, kForeign6, kProtoTcp, ack, 16));
  ASSERT_EQ(accepted_.size(), 1u);
  EXPECT_EQ(accepted_[0].local_ip, "2001:DB8::10");
  EXPECT_EQ(accepted_[0].local_port, 443);
  EXPECT_EQ(accepted_[0].remote_ip, "FD00:AB0C::5054:FF:FE12:3456");
}

// Echo to a foreign IPv6 address is eaten by the IPv6 hook and counted; to
// the gateway's address lwIP answers (after resolving the guest).
TEST_F(LwipIpv6Test, Icmp6EchoAnsweredForGatewayAddressesOnly) {
  const std::uint64_t eaten_before = abox_lwip_counters()->icmp_not_for_netif;
  Feed(Icmp6EchoFrame(kForeign6));
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(abox_lwip_counters()->icmp_not_for_netif, eaten_before + 1);

  Feed(Icmp6EchoFrame(kGateway6));
  EXPECT_EQ(abox_lwip_counters()->icmp_not_for_netif, eaten_before + 1);
  std::vector<Bytes> sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);  // the solicitation for the guest
  Feed(GuestNeighbourAdvertisement(kGateway6));
  sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  auto reply = ParseIpv6Frame(sent[0]);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->src, kGateway6);
  ASSERT_FALSE(reply->upper.empty());
  EXPECT_EQ(reply->upper[0], 129);  // echo reply
  EXPECT_TRUE(reply->checksum_ok);
}

}  // namespace
}  // namespace abox::netstack
