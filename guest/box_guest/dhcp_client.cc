// DhcpClient (see dhcp_client.h for how it works).
#include "guest/box_guest/dhcp_client.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "base/unique_fd.h"
#include "guest/box_guest/console.h"
#include "guest/box_guest/interface_config.h"

namespace abox::guest {
namespace {

constexpr int kMaxPacketsPerWait = 4096;  // bounds the loop even on a flooded link

class DhcpExchange {
 public:
  DhcpExchange(base::UniqueFd fd, int ifindex) : fd_(std::move(fd)), ifindex_(ifindex) {}

  bool send(const std::vector<std::uint8_t>& packet) {
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_protocol = htons(ETH_P_IP);
    to.sll_ifindex = ifindex_;
    to.sll_halen = 6;
    std::memset(to.sll_addr, 0xFF, 6);
    ssize_t n =
        ::sendto(fd_.get(), packet.data(), packet.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    if (n != static_cast<ssize_t>(packet.size())) {
      last_error_ = std::string("sendto: ") + std::strerror(errno);
      return false;
    }
    return true;
  }

  // The first reply to `id` that parses, until `deadline` (monotonic ms).
  std::optional<DhcpReply> wait_reply(const DhcpClientIdentity& id, std::int64_t deadline) {
    std::vector<std::uint8_t> buf(65536);
    for (int packets = 0; packets < kMaxPacketsPerWait;) {
      const std::int64_t left = deadline - monotonic_ms();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno != EINTR) {
        last_error_ = std::string("poll: ") + std::strerror(errno);
        return std::nullopt;
      }
      if (ready <= 0) continue;
      for (; packets < kMaxPacketsPerWait; ++packets) {
        sockaddr_ll from{};
        socklen_t from_len = sizeof from;
        ssize_t n = ::recvfrom(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
        if (n < 0) break;                                   // EAGAIN: wait again
        if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own DISCOVER, seen on the way out
        if (static_cast<std::size_t>(n) > buf.size()) {
          ++dropped_["truncated by the receive buffer"];
          continue;
        }
        auto reply = parse_dhcp_reply(std::span(buf).first(static_cast<std::size_t>(n)), id);
        if (reply.ok()) return *reply;
        if (dhcp_reply_is_someone_elses(reply.error())) continue;
        auto name = std::string(dhcp_reply_error_name(reply.error()));
        if (dropped_[name]++ == 0) console_line("dhcp: dropped a reply: " + name);
      }
    }
    return std::nullopt;
  }

  std::string drops() const {
    std::string s;
    for (const auto& [why, count] : dropped_) {
      s += s.empty() ? "; dropped " : ", ";
      s += std::to_string(count) + " (" + why + ")";
    }
    if (!last_error_.empty()) s += "; last error " + last_error_;
    return s;
  }

 private:
  base::UniqueFd fd_;
  int ifindex_;
  std::map<std::string, int> dropped_;
  std::string last_error_;
};

}  // namespace

base::Result<DhcpReply, std::string> lease_by_dhcp(std::string_view ifname, const DhcpClientLimits& limits,
                                                   base::RandomSource& random) {
  auto index = interface_index(ifname);
  if (!index.ok()) return base::Err{index.error()};
  auto mac = hardware_address(ifname);
  if (!mac.ok()) return base::Err{mac.error()};
  base::UniqueFd fd(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP)));
  if (!fd) return base::Err{std::string("socket(AF_PACKET): ") + std::strerror(errno)};
  sockaddr_ll at{};
  at.sll_family = AF_PACKET;
  at.sll_protocol = htons(ETH_P_IP);
  at.sll_ifindex = *index;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
    return base::Err{std::string("bind(AF_PACKET): ") + std::strerror(errno)};

  DhcpExchange exchange(std::move(fd), *index);
  const std::int64_t end = monotonic_ms() + limits.total_ms;
  int naks = 0, no_offer = 0, no_ack = 0;
  for (int attempt = 0; attempt < limits.attempts && monotonic_ms() < end; ++attempt) {
    DhcpClientIdentity id{static_cast<std::uint32_t>(random.next_u64()), *mac};
    std::vector<std::uint8_t> packet;
    build_dhcp_discover(id, packet);
    if (!exchange.send(packet)) break;
    auto offer = exchange.wait_reply(id, std::min(end, monotonic_ms() + limits.wait_ms));
    if (!offer || offer->kind != DhcpReplyKind::kOffer) {
      ++no_offer;
      continue;
    }
    packet.clear();
    build_dhcp_request(id, offer->your_address, offer->server_id, packet);
    if (!exchange.send(packet)) break;
    for (;;) {
      auto ack = exchange.wait_reply(id, std::min(end, monotonic_ms() + limits.wait_ms));
      if (!ack) {
        ++no_ack;
        break;
      }
      if (ack->kind == DhcpReplyKind::kOffer) continue;  // a late duplicate OFFER: keep waiting
      if (ack->kind == DhcpReplyKind::kNak) {
        ++naks;
        console_line("dhcp: NAK from " + ipv4_text(ack->server_id));
        break;
      }
      return *ack;
    }
  }
  return base::Err{"no lease: " + std::to_string(no_offer) + " DISCOVER without OFFER, " +
                   std::to_string(no_ack) + " REQUEST without ACK, " + std::to_string(naks) + " NAK" +
                   exchange.drops()};
}

}  // namespace abox::guest
