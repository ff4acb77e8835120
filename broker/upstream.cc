#include "broker/upstream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::broker {

namespace {
constexpr std::uint8_t kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
}

base::Result<SslCtxPtr, std::string> make_upstream_context(const std::string& extra_ca_file) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  if (!ctx) return base::Err{std::string("cannot make the upstream TLS context: ") + take_tls_error()};
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx.get(), kSystemRoots, nullptr) != 1) {
    // A machine without the system bundle can still use --upstream-ca.
    take_tls_error();
    if (extra_ca_file.empty()) return base::Err{std::string(kSystemRoots) + ": cannot load the system roots"};
  }
  if (!extra_ca_file.empty() &&
      SSL_CTX_load_verify_locations(ctx.get(), extra_ca_file.c_str(), nullptr) != 1) {
    return base::Err{extra_ca_file + ": not a PEM CA certificate file (" + take_tls_error() + ")"};
  }
  if (SSL_CTX_set_alpn_protos(ctx.get(), kAlpnHttp11, sizeof kAlpnHttp11) != 0) {
    return base::Err{std::string("cannot set ALPN")};
  }
  return ctx;
}

SslPtr make_upstream_ssl(SSL_CTX* ctx, const std::string& name) {
  SslPtr ssl(SSL_new(ctx));
  if (!ssl) return nullptr;
  SSL_set_connect_state(ssl.get());
  if (SSL_set_tlsext_host_name(ssl.get(), name.c_str()) != 1 || SSL_set1_host(ssl.get(), name.c_str()) != 1) {
    return nullptr;
  }
  SSL_set_hostflags(ssl.get(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return ssl;
}

socklen_t fill_sockaddr(const policy::IpAddress& address, std::uint16_t port, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  if (address.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    std::memcpy(&sin->sin_addr, address.bytes().data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_port = htons(port);
  std::memcpy(&sin6->sin6_addr, address.bytes().data(), 16);
  return sizeof(sockaddr_in6);
}

base::UniqueFd connect_nonblocking(const policy::IpAddress& address, std::uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = fill_sockaddr(address, port, ss);
  base::UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) return {};
  return fd;
}

int connect_result(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace abox::broker
