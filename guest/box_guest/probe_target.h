// The self-test's targets as setup gives them (docs/control-protocol.md):
// "ADDR:PORT" for the direct_address and foreign_resolver probes (IPv4
// "93.184.215.18:80", or IPv6 "[2001:db8::1]:53"), and the abox nonce an
// environment variable must hold for nonce_in_env.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace abox::guest {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = 0;
};

// nullopt unless `text` is exactly ADDR:PORT with a port of 1-65535.
std::optional<SocketAddress> parse_address_port(std::string_view text);

// "abox-nonce-" and 64 lower-case hex digits, nothing else: what the broker
// derives (broker/nonce.h, is_nonce_shaped()).
bool is_abox_nonce(std::string_view value);

}  // namespace abox::guest
