// RouteSocket: the few rtnetlink requests abox-net makes once, at setup, to
// configure the guest's tap (TapLink::create_in_netns): look up a link's
// index by name, change a link's MTU, MAC address and up flag, add an
// address, add a default route. Nothing on the data path uses it.
//
// read_address_messages() reads the kernel's address dumps and
// notifications for HostAddressWatch (host_address_watch.h), which follows
// abox-net's own addresses on a socket of its own.
//
// One NETLINK_ROUTE socket per RouteSocket (closed with it). The socket
// belongs to the network namespace it was opened in, whichever namespace
// the thread is in later. Each request is one message with a fresh sequence
// number and NLM_F_ACK (a link lookup gets the link or an error instead);
// the call blocks until the kernel's answer to that sequence number, which
// rtnetlink sends before sendto() returns. Errors are the kernel's errno.
//
// Replies are parsed by read_answer() through base::ByteReader: every
// message length is checked against the datagram, messages for other
// sequence numbers or from anyone but the kernel are skipped, and a reply
// that does not parse is EPROTO, never a guess.
#pragma once

#include <linux/netlink.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "policy/ip_address.h"

namespace abox::netstack::rtnl {

// One request message under construction: the netlink header, the family
// header (ifinfomsg, ifaddrmsg, rtmsg), then attributes, each padded to 4.
class Request {
 public:
  // NLM_F_REQUEST is always set; `flags` adds the rest (NLM_F_ACK, ...).
  Request(std::uint16_t type, std::uint16_t flags);

  // The family header; call once, before any attribute.
  template <class Header>
  void header(const Header& h) {
    append(std::as_bytes(std::span(&h, 1)));
  }
  void attr(std::uint16_t type, std::span<const std::byte> value);
  void attr_u32(std::uint16_t type, std::uint32_t value);
  void attr_string(std::uint16_t type, std::string_view value);  // with its NUL
  void attr_address(std::uint16_t type, const policy::IpAddress& a);

  // The finished message with `seq` in its header.
  std::span<const std::uint8_t> finish(std::uint32_t seq);

 private:
  void append(std::span<const std::byte> bytes);
  std::vector<std::uint8_t> bytes_;
};

// What one datagram from the kernel says about the request numbered seq.
struct Answer {
  enum class Kind {
    kNothing,    // nothing for this request here: read on
    kAck,        // done (NLMSG_ERROR with error 0)
    kError,      // refused: errno in `error`
    kLink,       // an RTM_NEWLINK for it: its index in `ifindex`
    kMalformed,  // lengths that do not add up
  };
  Kind kind = Kind::kNothing;
  int error = 0;
  int ifindex = 0;
};

// Reads the netlink messages of one datagram, in order, and returns the
// first answer to `seq` (see Answer). Checks: each header fits, nlmsg_len
// covers the header and stays inside the datagram, an NLMSG_ERROR holds its
// error code, an RTM_NEWLINK holds its ifinfomsg.
Answer read_answer(std::span<const std::uint8_t> datagram, std::uint32_t seq);

// What one datagram from the kernel says about addresses: a part of an
// RTM_GETADDR dump (numbered `dump_seq`) or notifications of the
// RTMGRP_IPV4_IFADDR / RTMGRP_IPV6_IFADDR groups (any sequence number).
struct AddressChange {
  bool added = true;  // RTM_NEWADDR; false: RTM_DELADDR
  policy::IpAddress address;
};
struct AddressMessages {
  enum class End {
    kMore,       // read on
    kDone,       // NLMSG_DONE of the dump numbered dump_seq
    kError,      // NLMSG_ERROR for it: errno in `error`
    kMalformed,  // lengths that do not add up: nothing of the datagram is used
  };
  End end = End::kMore;
  int error = 0;
  std::vector<AddressChange> changes;  // in the datagram's order
  // An RTM_NEWROUTE or RTM_DELROUTE was among the messages (the
  // RTMGRP_IPV6_ROUTE group): what it says is not read, only that routes
  // changed.
  bool routes_changed = false;
};

// Reads every message of one datagram, in order. Checks, besides
// read_answer()'s: an RTM_NEWADDR or RTM_DELADDR holds its ifaddrmsg, each
// attribute's length covers its header and stays inside the message, and
// the address (IFA_LOCAL, or IFA_ADDRESS when there is none: the host's own
// end of the link, never a point-to-point peer) is 4 bytes for AF_INET or
// 16 for AF_INET6. Other families, other messages and an address message
// without an address are skipped.
AddressMessages read_address_messages(std::span<const std::uint8_t> datagram, std::uint32_t dump_seq);

class RouteSocket {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace.
  static base::Result<RouteSocket, int> open();

  // The index of the link named `name`, or nullopt when there is none.
  base::Result<std::optional<int>, int> link_index(std::string_view name);
  // Any of MTU and MAC, and IFF_UP when `up`, on link `ifindex`.
  base::Result<void, int> set_link(int ifindex, std::optional<std::uint32_t> mtu,
                                   std::optional<std::array<std::uint8_t, 6>> mac, bool up);
  // `address`/`prefix` on link `ifindex` (NLM_F_EXCL: EEXIST when there),
  // with `broadcast` if given; IPv6 addresses skip duplicate detection.
  base::Result<void, int> add_address(int ifindex, const policy::IpAddress& address, unsigned prefix,
                                      std::optional<policy::IpAddress> broadcast);
  // A default route via `gateway` out of link `ifindex`, in the main table
  // (NLM_F_EXCL: EEXIST when a default route is there).
  base::Result<void, int> add_default_route(int ifindex, const policy::IpAddress& gateway);

 private:
  explicit RouteSocket(base::UniqueFd fd) : fd_(std::move(fd)) {}
  // Sends `request` and reads until its answer.
  base::Result<Answer, int> exchange(Request& request);

  base::UniqueFd fd_;
  std::uint32_t seq_ = 0;
};

}  // namespace abox::netstack::rtnl
