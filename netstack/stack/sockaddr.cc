#include "netstack/stack/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace abox::netstack {

socklen_t to_sockaddr(const policy::Endpoint& ep, sockaddr_storage& ss) {
  std::memset(&ss, 0, sizeof ss);
  if (ep.address.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(ep.port);
    std::memcpy(&sin->sin_addr, ep.address.bytes().data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_port = htons(ep.port);
  std::memcpy(&sin6->sin6_addr, ep.address.bytes().data(), 16);
  return sizeof(sockaddr_in6);
}

std::optional<policy::Endpoint> from_sockaddr(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    std::uint8_t b[4];
    std::memcpy(b, &sin->sin_addr, 4);
    return policy::Endpoint{policy::IpAddress::v4_bytes(b), ntohs(sin->sin_port)};
  }
  if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), &sin6->sin6_addr, 16);
    return policy::Endpoint{policy::IpAddress::v6(b), ntohs(sin6->sin6_port)};
  }
  return std::nullopt;
}

}  // namespace abox::netstack
