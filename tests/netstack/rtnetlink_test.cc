// rtnl::read_answer on nasty replies, rtnl::Request's layout, and
// RouteSocket against the kernel in a namespace of its own (root only; the
// tap tests in tap_link_test.cc configure a whole guest network through it).
#include "netstack/rtnetlink.h"

#include <gtest/gtest.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "tests/netstack/link_test_support.h"

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
  if (!link_test::is_root()) GTEST_SKIP() << link_test::kNeedRoot;
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
