#include "netstack/stack/host_tcp_info.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

#include "base/unique_fd.h"

namespace abox::netstack {
namespace {

// A connected TCP pair over loopback, and bytes through it.
struct LoopbackPair {
  base::UniqueFd client, server;
};

LoopbackPair connected_pair() {
  base::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::listen(listener.get(), 1), 0);
  EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  LoopbackPair p{base::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), {}};
  EXPECT_EQ(::connect(p.client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  p.server = base::UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  return p;
}

TEST(HostTcpInfoTest, ATcpSocketOverLoopbackHasNothingResentOrOutOfOrder) {
  LoopbackPair p = connected_pair();
  ASSERT_TRUE(p.client && p.server);
  std::array<char, 4096> bytes{};
  ASSERT_EQ(::send(p.client.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::recv(p.server.get(), bytes.data(), bytes.size(), MSG_WAITALL),
            static_cast<ssize_t>(bytes.size()));
  for (const auto& fd : {&p.client, &p.server}) {
    const auto info = read_host_tcp_info(fd->get());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->retransmits, 0u);
    EXPECT_EQ(info->out_of_order_received, 0u);
  }
}

TEST(HostTcpInfoTest, ASocketThatIsNotTcpGivesNothing) {
  std::array<int, 2> fds{};
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds.data()), 0);
  const base::UniqueFd a(fds[0]), b(fds[1]);
  EXPECT_FALSE(read_host_tcp_info(a.get()).has_value());  // the broker's socket is one such
  const base::UniqueFd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  EXPECT_FALSE(read_host_tcp_info(udp.get()).has_value());
  EXPECT_FALSE(read_host_tcp_info(-1).has_value());
}

}  // namespace
}  // namespace abox::netstack
