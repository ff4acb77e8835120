// LoopbackUdpPair: two non-blocking UDP sockets on 127.0.0.1, `out`
// connected to `in`, for tests of code that reads or writes datagrams.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string_view>

#include "base/unique_fd.h"

namespace abox::testing {

struct LoopbackUdpPair {
  base::UniqueFd in;
  base::UniqueFd out;

  LoopbackUdpPair() {
    in.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    out.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    int big = 1 << 20;  // room for a test's bursts
    ::setsockopt(in.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(in.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::getsockname(in.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    EXPECT_EQ(::connect(out.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  // One datagram from out to in.
  void send(std::string_view s) const {
    ASSERT_EQ(::send(out.get(), s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
};

}  // namespace abox::testing
