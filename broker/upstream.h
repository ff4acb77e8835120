// The broker's side towards the provider: the client TLS context and the
// start of each upstream connection (condition 7 of the gate).
//
// make_upstream_context(): TLS 1.2+, peer verification on, trust = the
// system roots (/etc/ssl/certs/ca-certificates.crt) plus an optional extra
// CA file (tests: the fake provider's own CA), ALPN http/1.1.
// make_upstream_ssl(): one client SSL for `name`: SNI = name, hostname
// checking against name (no partial wildcards), so a certificate for any
// other name fails the handshake.
// connect_nonblocking(): a TCP socket to one resolved address, connect()
// started; completion is reported by writability (then SO_ERROR).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "broker/tls.h"
#include "policy/ip_address.h"

namespace abox::broker {

inline constexpr const char* kSystemRoots = "/etc/ssl/certs/ca-certificates.crt";

// Error: a message (startup).
base::Result<SslCtxPtr, std::string> make_upstream_context(const std::string& extra_ca_file);

SslPtr make_upstream_ssl(SSL_CTX* ctx, const std::string& name);

// Fills `out` for address:port; returns the length to pass to bind/connect.
socklen_t fill_sockaddr(const policy::IpAddress& address, std::uint16_t port, sockaddr_storage& out);

// An fd with connect() in progress (or done); invalid on an immediate error.
base::UniqueFd connect_nonblocking(const policy::IpAddress& address, std::uint16_t port);

// After writability: 0 when connected, else the errno of the failure.
int connect_result(int fd);

}  // namespace abox::broker
