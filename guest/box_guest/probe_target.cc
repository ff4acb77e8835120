#include "guest/box_guest/probe_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "base/decimal.h"

namespace abox::guest {

std::optional<SocketAddress> parse_address_port(std::string_view text) {
  std::string_view host;
  std::string_view port;
  bool v6 = false;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    v6 = true;
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto p = base::parse_port(port);
  if (!p || host.empty() || host.size() > 45) return std::nullopt;
  // inet_pton reads a C string: a NUL inside would end the address early.
  for (char c : host) {
    const bool address_char =
        (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':';
    if (!address_char) return std::nullopt;
  }
  std::string h(host);
  SocketAddress a;
  if (v6) {
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(*p);
    if (::inet_pton(AF_INET6, h.c_str(), &sin6.sin6_addr) != 1) return std::nullopt;
    std::memcpy(&a.storage, &sin6, sizeof sin6);
    a.length = sizeof sin6;
    a.family = AF_INET6;
  } else {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(*p);
    if (::inet_pton(AF_INET, h.c_str(), &sin.sin_addr) != 1) return std::nullopt;
    std::memcpy(&a.storage, &sin, sizeof sin);
    a.length = sizeof sin;
    a.family = AF_INET;
  }
  return a;
}

bool is_abox_nonce(std::string_view value) {
  constexpr std::string_view kPrefix = "abox-nonce-";
  if (value.size() != kPrefix.size() + 64 || value.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char c : value.substr(kPrefix.size())) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!hex) return false;
  }
  return true;
}

}  // namespace abox::guest
