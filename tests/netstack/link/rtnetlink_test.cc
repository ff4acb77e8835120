// rtnl::read_answer and rtnl::read_address_messages on nasty replies,
// rtnl::Request's layout, and
// RouteSocket against the kernel in a namespace of its own (root only; the
// tap tests in tap_link_test.cc configure a whole guest network through it).
#include "netstack/link/rtnetlink.h"

#include <gtest/gtest.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "tests/netstack/link/link_test_support.h"

namespace abox::netstack::rtnl {
namespace {

using Bytes = std::vector<std::uint8_t>;

// Appends one netlink message: header (nlmsg_len = header + payload unless
// `len` says otherwise), payload, padding to 4.
void add_message(Bytes& out, std::uint16_t type, std::uint32_t seq, const Bytes& payload,
                 std::optional<std::uint32_t> len = std::nullopt) {
  nlmsghdr h{};
  h.nlmsg_len = len.value_or(static_cast<std::uint32_t>(sizeof h + payload.size()));
  h.nlmsg_type = type;
  h.nlmsg_seq = seq;
  const auto* p = reinterpret_cast<const std::uint8_t*>(&h);
  out.insert(out.end(), p, p + sizeof h);
  out.insert(out.end(), payload.begin(), payload.end());
  while (out.size() % 4 != 0) out.push_back(0);
}

template <class T>
Bytes bytes_of(const T& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  return Bytes(p, p + sizeof v);
}

Bytes error_payload(int code) {
  nlmsgerr e{};
  e.error = code;
  return bytes_of(e);
}

Bytes link_payload(int ifindex) {
  ifinfomsg info{};
  info.ifi_index = ifindex;
  // Sized once (growing the vector made GCC 12 at -O3 report a false
  // -Warray-bounds), then 64 bytes of attributes we do not read.
  Bytes out(sizeof info + 64, 0xAB);
  std::memcpy(out.data(), &info, sizeof info);
  return out;
}

TEST(RtnetlinkReadAnswer, AckErrorAndLink) {
  Bytes ack;
  add_message(ack, NLMSG_ERROR, 7, error_payload(0));
  EXPECT_EQ(read_answer(ack, 7).kind, Answer::Kind::kAck);

  Bytes err;
  add_message(err, NLMSG_ERROR, 7, error_payload(-EEXIST));
  const Answer e = read_answer(err, 7);
  EXPECT_EQ(e.kind, Answer::Kind::kError);
  EXPECT_EQ(e.error, EEXIST);

  Bytes link;
  add_message(link, RTM_NEWLINK, 7, link_payload(42));
  const Answer l = read_answer(link, 7);
  EXPECT_EQ(l.kind, Answer::Kind::kLink);
  EXPECT_EQ(l.ifindex, 42);
}

TEST(RtnetlinkReadAnswer, OtherSequenceNumbersAndOtherTypesAreSkipped) {
  Bytes d;
  add_message(d, NLMSG_ERROR, 6, error_payload(-ENODEV));  // an earlier request's
  add_message(d, NLMSG_NOOP, 7, {});
  add_message(d, NLMSG_DONE, 7, bytes_of(0));
  add_message(d, NLMSG_ERROR, 7, error_payload(0));
  EXPECT_EQ(read_answer(d, 7).kind, Answer::Kind::kAck);

  Bytes stale;
  add_message(stale, NLMSG_ERROR, 6, error_payload(0));
  EXPECT_EQ(read_answer(stale, 7).kind, Answer::Kind::kNothing);
  EXPECT_EQ(read_answer({}, 7).kind, Answer::Kind::kNothing);
}

TEST(RtnetlinkReadAnswer, LengthsThatDoNotAddUpAreMalformed) {
  Bytes short_header(sizeof(nlmsghdr) - 1, 0);
  EXPECT_EQ(read_answer(short_header, 1).kind, Answer::Kind::kMalformed);

  Bytes len_below_header;
  add_message(len_below_header, NLMSG_ERROR, 1, error_payload(0), sizeof(nlmsghdr) - 1);
  EXPECT_EQ(read_answer(len_below_header, 1).kind, Answer::Kind::kMalformed);

  Bytes len_past_end;
  add_message(len_past_end, NLMSG_ERROR, 1, error_payload(0), 4096);
  EXPECT_EQ(read_answer(len_past_end, 1).kind, Answer::Kind::kMalformed);

  Bytes huge_len;
  add_message(huge_len, NLMSG_ERROR, 1, error_payload(0), 0xFFFF'FFFFU);
  EXPECT_EQ(read_answer(huge_len, 1).kind, Answer::Kind::kMalformed);

  // A message too short for what its type carries.
  Bytes short_error;
  add_message(short_error, NLMSG_ERROR, 1, Bytes{0, 0});
  EXPECT_EQ(read_answer(short_error, 1).kind, Answer::Kind::kMalformed);
  Bytes short_link;
  add_message(short_link, RTM_NEWLINK, 1, Bytes(sizeof(ifinfomsg) - 1, 0));
  EXPECT_EQ(read_answer(short_link, 1).kind, Answer::Kind::kMalformed);

  // A good message followed by a torn one: the answer comes first.
  Bytes then_torn;
  add_message(then_torn, NLMSG_ERROR, 1, error_payload(0));
  then_torn.resize(then_torn.size() + 3, 0);
  EXPECT_EQ(read_answer(then_torn, 1).kind, Answer::Kind::kAck);
  // ... but a torn one in front of it is malformed.
  Bytes torn_first;
  add_message(torn_first, NLMSG_ERROR, 9, error_payload(0), sizeof(nlmsghdr) + 64);
  add_message(torn_first, NLMSG_ERROR, 1, error_payload(0));
  EXPECT_EQ(read_answer(torn_first, 1).kind, Answer::Kind::kMalformed);
}

TEST(RtnetlinkReadAnswer, ACodeThatIsNoErrnoIsAProtocolError) {
  // Positive, past MAX_ERRNO, and INT_MIN (whose negation would overflow:
  // found by the rtnetlink_answer fuzz target).
  for (const int code : {5, -4096, std::numeric_limits<int>::min()}) {
    Bytes d;
    add_message(d, NLMSG_ERROR, 1, error_payload(code));
    const Answer a = read_answer(d, 1);
    EXPECT_EQ(a.kind, Answer::Kind::kError) << code;
    EXPECT_EQ(a.error, EPROTO) << code;
  }
  Bytes largest;
  add_message(largest, NLMSG_ERROR, 1, error_payload(-4095));
  EXPECT_EQ(read_answer(largest, 1).error, 4095);
}

TEST(RtnetlinkReadAnswer, EveryTruncationOfAGoodReplyIsSafe) {
  Bytes d;
  add_message(d, NLMSG_ERROR, 3, error_payload(-ENOENT));
  add_message(d, RTM_NEWLINK, 4, link_payload(9));
  for (std::size_t n = 0; n < d.size(); ++n) {
    const Answer a = read_answer(std::span(d.data(), n), 4);
    EXPECT_NE(a.kind, Answer::Kind::kLink) << n;  // never read from past the cut
  }
  EXPECT_EQ(read_answer(d, 4).ifindex, 9);
}

// An ifaddrmsg of `family` and the attributes (type, value), each padded.
Bytes address_payload(std::uint8_t family, const std::vector<std::pair<std::uint16_t, Bytes>>& attrs) {
  ifaddrmsg msg{};
  msg.ifa_family = family;
  Bytes out = bytes_of(msg);
  for (const auto& [type, value] : attrs) {
    rtattr a{};
    a.rta_len = static_cast<unsigned short>(sizeof a + value.size());
    a.rta_type = type;
    const Bytes head = bytes_of(a);
    out.insert(out.end(), head.begin(), head.end());
    out.insert(out.end(), value.begin(), value.end());
    while (out.size() % 4 != 0) out.push_back(0);
  }
  return out;
}

const Bytes kV4Local = {45, 33, 250, 1};
const Bytes kV4Peer = {45, 33, 250, 2};
const Bytes kV6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5};

TEST(RtnetlinkAddressMessages, NewAndDeletedAddressesInOrder) {
  Bytes d;
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_ADDRESS, kV4Local}, {IFA_LOCAL, kV4Local}}));
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET6, {{IFA_ADDRESS, kV6}}));
  add_message(d, RTM_DELADDR, 0, address_payload(AF_INET, {{IFA_LOCAL, kV4Local}}));
  const auto m = read_address_messages(d, 5);
  EXPECT_EQ(m.end, AddressMessages::End::kMore);
  ASSERT_EQ(m.changes.size(), 3u);
  EXPECT_TRUE(m.changes[0].added);
  EXPECT_EQ(m.changes[0].address.to_string(), "45.33.250.1");
  EXPECT_EQ(m.changes[1].address.to_string(), "2001:db8::5");
  EXPECT_FALSE(m.changes[2].added);
}

// A route notification (RTMGRP_IPV6_ROUTE) says only that routes changed;
// its body is not read, so even a route message too short for an rtmsg is
// no reason to refuse the datagram (what beside it says still counts).
TEST(RtnetlinkAddressMessages, RouteMessagesOnlySayRoutesChanged) {
  Bytes d;
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET6, {{IFA_ADDRESS, kV6}}));
  EXPECT_FALSE(read_address_messages(d, 5).routes_changed);
  add_message(d, RTM_DELROUTE, 0, Bytes{1, 2});
  add_message(d, RTM_NEWROUTE, 0, Bytes(12, 0));
  const auto m = read_address_messages(d, 5);
  EXPECT_EQ(m.end, AddressMessages::End::kMore);
  EXPECT_TRUE(m.routes_changed);
  ASSERT_EQ(m.changes.size(), 1u);
  EXPECT_EQ(m.changes[0].address.to_string(), "2001:db8::5");
}

TEST(RtnetlinkAddressMessages, TheLocalEndNotAPointToPointPeer) {
  Bytes d;
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_ADDRESS, kV4Peer}, {IFA_LOCAL, kV4Local}}));
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_LOCAL, kV4Local}, {IFA_ADDRESS, kV4Peer}}));
  const auto m = read_address_messages(d, 5);
  ASSERT_EQ(m.changes.size(), 2u);
  EXPECT_EQ(m.changes[0].address.to_string(), "45.33.250.1");
  EXPECT_EQ(m.changes[1].address.to_string(), "45.33.250.1");
}

TEST(RtnetlinkAddressMessages, TheDumpsEndAndErrorAreItsOwn) {
  Bytes d;
  add_message(d, NLMSG_DONE, 4, bytes_of(0));  // an older dump's
  add_message(d, RTM_NEWADDR, 5, address_payload(AF_INET, {{IFA_LOCAL, kV4Local}}));
  add_message(d, NLMSG_DONE, 5, bytes_of(0));
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET6, {{IFA_ADDRESS, kV6}}));  // after the end: not read
  const auto m = read_address_messages(d, 5);
  EXPECT_EQ(m.end, AddressMessages::End::kDone);
  ASSERT_EQ(m.changes.size(), 1u);
  Bytes e;
  add_message(e, NLMSG_ERROR, 5, error_payload(-EBUSY));
  const auto err = read_address_messages(e, 5);
  EXPECT_EQ(err.end, AddressMessages::End::kError);
  EXPECT_EQ(err.error, EBUSY);
  Bytes other;
  add_message(other, NLMSG_ERROR, 4, error_payload(-EBUSY));
  EXPECT_EQ(read_address_messages(other, 5).end, AddressMessages::End::kMore);
}

TEST(RtnetlinkAddressMessages, WhatIsNotAnAddressIsSkipped) {
  Bytes d;
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_PACKET, {{IFA_LOCAL, Bytes(6, 1)}}));  // another family
  add_message(d, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_LABEL, Bytes{'l', 'o', 0}}}));  // no address
  add_message(d, RTM_NEWLINK, 0, link_payload(3));
  const auto m = read_address_messages(d, 5);
  EXPECT_EQ(m.end, AddressMessages::End::kMore);
  EXPECT_TRUE(m.changes.empty());
}

TEST(RtnetlinkAddressMessages, LengthsThatDoNotAddUpAreMalformed) {
  auto malformed = [](const Bytes& d) {
    const auto m = read_address_messages(d, 5);
    return m.end == AddressMessages::End::kMalformed && m.changes.empty();
  };
  Bytes short_msg;
  add_message(short_msg, RTM_NEWADDR, 0, Bytes(sizeof(ifaddrmsg) - 1, 0));
  EXPECT_TRUE(malformed(short_msg));
  Bytes wrong_size;  // an IPv4 address of 16 bytes
  add_message(wrong_size, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_LOCAL, kV6}}));
  EXPECT_TRUE(malformed(wrong_size));
  Bytes attr_past_end = address_payload(AF_INET, {{IFA_LOCAL, kV4Local}});
  attr_past_end[sizeof(ifaddrmsg)] = 64;  // rta_len past the message
  Bytes d;
  add_message(d, RTM_NEWADDR, 0, attr_past_end);
  EXPECT_TRUE(malformed(d));
  Bytes attr_below_header = address_payload(AF_INET, {{IFA_LOCAL, kV4Local}});
  attr_below_header[sizeof(ifaddrmsg)] = 2;
  Bytes d2;
  add_message(d2, RTM_NEWADDR, 0, attr_below_header);
  EXPECT_TRUE(malformed(d2));
  // A good message, then a torn one: nothing of the datagram is used.
  Bytes torn;
  add_message(torn, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_LOCAL, kV4Local}}));
  add_message(torn, RTM_NEWADDR, 0, address_payload(AF_INET, {{IFA_LOCAL, kV4Local}}), 4096);
  EXPECT_TRUE(malformed(torn));
  // Every cut of a good datagram is safe.
  Bytes good;
  add_message(good, RTM_NEWADDR, 0, address_payload(AF_INET6, {{IFA_ADDRESS, kV6}}));
  add_message(good, NLMSG_DONE, 5, bytes_of(0));
  for (std::size_t n = 0; n < good.size(); ++n) {
    const auto m = read_address_messages(std::span(good.data(), n), 5);
    EXPECT_NE(m.end, AddressMessages::End::kDone) << n;
  }
}

TEST(RtnetlinkRequest, LayoutIsHeaderFamilyHeaderThenPaddedAttributes) {
  Request req(RTM_GETLINK, NLM_F_ACK);
  ifinfomsg info{};
  info.ifi_index = 3;
  req.header(info);
  req.attr_string(IFLA_IFNAME, "eth0");  // 4 + 5 bytes, padded to 12
  req.attr_u32(IFLA_MTU, 1500);
  const auto m = req.finish(77);
  ASSERT_EQ(m.size(), sizeof(nlmsghdr) + sizeof(ifinfomsg) + 12 + 8);
  nlmsghdr h{};
  std::memcpy(&h, m.data(), sizeof h);
  EXPECT_EQ(h.nlmsg_len, m.size());
  EXPECT_EQ(h.nlmsg_type, RTM_GETLINK);
  EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK);
  EXPECT_EQ(h.nlmsg_seq, 77U);
  rtattr a{};
  std::memcpy(&a, m.data() + sizeof h + sizeof info, sizeof a);
  EXPECT_EQ(a.rta_type, IFLA_IFNAME);
  EXPECT_EQ(a.rta_len, 4 + 5);
  EXPECT_EQ(std::memcmp(m.data() + sizeof h + sizeof info + 4, "eth0", 5), 0);
  std::memcpy(&a, m.data() + sizeof h + sizeof info + 12, sizeof a);
  EXPECT_EQ(a.rta_type, IFLA_MTU);
  EXPECT_EQ(a.rta_len, 8);
}

// Runs `body` on a thread that has a network namespace of its own (so this
// process's namespace is never touched); needs root.
template <class Body>
void in_fresh_netns(Body body) {
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
      return;
    }
    body();
  });
  t.join();
}

TEST(RouteSocket, ConfiguresLoInAFreshNamespace) {
  ABOX_NEEDS_ROOT(link_test::kNeedRoot);
  in_fresh_netns([] {
    auto rs = RouteSocket::open();
    ASSERT_TRUE(rs.ok()) << std::strerror(rs.error());
    auto missing = rs->link_index("abox-none0");
    ASSERT_TRUE(missing.ok()) << std::strerror(missing.error());
    EXPECT_FALSE(missing->has_value());

    auto lo = rs->link_index("lo");
    ASSERT_TRUE(lo.ok() && lo->has_value());
    EXPECT_EQ(**lo, 1);  // lo is always 1 in a new namespace
    ASSERT_TRUE(rs->set_link(**lo, 1500, std::nullopt, true).ok());

    const auto addr = policy::IpAddress::v4(0x0A00'0201);  // 10.0.2.1
    auto added = rs->add_address(**lo, addr, 24, policy::IpAddress::v4(0x0A00'02FF));
    ASSERT_TRUE(added.ok()) << std::strerror(added.error());
    auto again = rs->add_address(**lo, addr, 24, std::nullopt);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error(), EEXIST);

    auto route = rs->add_default_route(**lo, policy::IpAddress::v4(0x0A00'0202));
    ASSERT_TRUE(route.ok()) << std::strerror(route.error());
    auto route_again = rs->add_default_route(**lo, policy::IpAddress::v4(0x0A00'0202));
    ASSERT_FALSE(route_again.ok());
    EXPECT_EQ(route_again.error(), EEXIST);

    auto bad_index = rs->set_link(999'999, 1500, std::nullopt, false);
    ASSERT_FALSE(bad_index.ok());
    EXPECT_EQ(bad_index.error(), ENODEV);
  });
}

}  // namespace
}  // namespace abox::netstack::rtnl
