// HostAddressWatch (see the header). The datagrams are parsed by
// rtnl::read_address_messages() (rtnetlink.cc), bounds-checked like every
// reply abox-net reads from the kernel.
#include "netstack/program/host_address_watch.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "netstack/link/rtnetlink.h"

namespace abox::netstack {

namespace {

// A dump's datagrams are at most a page or two; notifications are small.
constexpr std::size_t kReceiveBytes = 64 * 1024;
// Datagrams read at start before giving up on the dump's end: a host with
// thousands of addresses fits in far fewer.
constexpr int kMaxDumpDatagrams = 4096;
// Datagrams read per wake-up before yielding the turn.
constexpr int kMaxPerTurn = 64;
// The socket's receive buffer: room for bursts of notifications.
constexpr int kSocketBuffer = 1 << 20;

}  // namespace

HostAddressWatch::HostAddressWatch(io::EventLoop& loop, policy::HostAddresses& into, base::EventLog& events,
                                   base::UniqueFd fd)
    : loop_(loop),
      set_(into),
      events_(events),
      fd_(std::move(fd)),
      buffer_(std::make_unique_for_overwrite<std::uint8_t[]>(kReceiveBytes)) {}

HostAddressWatch::~HostAddressWatch() {
  if (handle_ != io::EventLoop::kNoHandle) loop_.unwatch(handle_);
}

base::Result<std::unique_ptr<HostAddressWatch>, std::string> HostAddressWatch::start(
    io::EventLoop& loop, policy::HostAddresses& into, base::EventLog& events) {
  auto fail = [](std::string what) {
    return base::Err{"cannot read this host's addresses: " + what + ": " + std::strerror(errno)};
  };
  base::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) return fail("netlink socket");
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &kSocketBuffer, sizeof kSocketBuffer);
  const int off = 0;
  ::setsockopt(fd.get(), SOL_NETLINK, NETLINK_EXT_ACK, &off, sizeof off);
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) return fail("bind");

  std::unique_ptr<HostAddressWatch> w(new HostAddressWatch(loop, into, events, std::move(fd)));
  into.clear();
  if (!w->ask_dump()) return fail("dump request");
  for (int i = 0; i < kMaxDumpDatagrams && w->dumping_; ++i) {
    if (w->read_one() < 0) return fail("reading the dump");
  }
  if (w->dumping_) {
    errno = EPROTO;
    return fail("the dump did not end");
  }
  if (w->full_reported_) {
    errno = ENOSPC;
    return fail("more than " + std::to_string(policy::HostAddresses::kMaxAddresses) + " addresses");
  }
  const int flags = ::fcntl(w->fd_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(w->fd_.get(), F_SETFL, flags | O_NONBLOCK) != 0) return fail("O_NONBLOCK");
  w->changes_ = 0;
  w->handle_ = loop.watch(w->fd_.get(), POLLIN, w.get());
  std::string list;
  for (const auto& a : into.addresses()) {
    if (!list.empty()) list += ' ';
    list += a.to_string();
  }
  events.emit("host_address", {{"reason", "this host's addresses: reserved, never admitted"},
                               {"count", static_cast<std::uint64_t>(into.size())},
                               {"addresses", list}});
  return w;
}

bool HostAddressWatch::ask_dump() {
  rtnl::Request req(RTM_GETADDR, NLM_F_DUMP);
  ifaddrmsg msg{};
  msg.ifa_family = AF_UNSPEC;
  req.header(msg);
  const auto bytes = req.finish(++seq_);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  const ssize_t sent = ::sendto(fd_.get(), bytes.data(), bytes.size(), 0,
                                reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
  if (sent != static_cast<ssize_t>(bytes.size())) return false;
  dumping_ = true;
  return true;
}

int HostAddressWatch::read_one() {
  sockaddr_nl from{};
  socklen_t from_len = sizeof from;
  const ssize_t n = ::recvfrom(fd_.get(), buffer_.get(), kReceiveBytes, MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    if (errno == ENOBUFS) {
      // Notifications were lost: ask for everything again (unless a dump is
      // already coming, which lists everything anyway).
      ++overruns_;
      if (on_routes_changed_) on_routes_changed_();
      events_.emit("host_address",
                   {{"reason", "notifications lost (socket overrun): reading every address again"}});
      if (!dumping_ && !ask_dump()) return -1;
      return 1;
    }
    return -1;
  }
  if (static_cast<std::size_t>(n) > kReceiveBytes) return 1;  // truncated (MSG_TRUNC): not ours to guess at
  if (from_len < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0) return 1;  // not the kernel
  const auto messages =
      rtnl::read_address_messages(std::span(buffer_.get(), static_cast<std::size_t>(n)), seq_);
  if (messages.end == rtnl::AddressMessages::End::kMalformed) {
    events_.emit("host_address", {{"reason", "a malformed rtnetlink datagram was ignored"}});
    return 1;
  }
  for (const auto& c : messages.changes) {
    const bool had = set_.contains(c.address);
    if (c.added) {
      if (!set_.add(c.address)) {
        full_reported_ = true;
        events_.emit("host_address", {{"reason", "too many addresses: this one is not reserved"},
                                      {"address", c.address.to_string()}});
        continue;
      }
    } else if (!dumping_) {
      // During a dump an address listed before the removal would come back
      // (fail closed); a removal applies once nothing is being listed.
      set_.remove(c.address);
    }
    if (had != set_.contains(c.address) && handle_ != io::EventLoop::kNoHandle) {
      ++changes_;
      events_.emit("host_address", {{"reason", c.added ? "added: reserved, never admitted" : "removed"},
                                    {"address", c.address.to_string()}});
    }
  }
  if (messages.routes_changed && on_routes_changed_) on_routes_changed_();
  if (messages.end == rtnl::AddressMessages::End::kDone) dumping_ = false;
  if (messages.end == rtnl::AddressMessages::End::kError) {
    dumping_ = false;
    errno = messages.error;
    return -1;
  }
  return 1;
}

void HostAddressWatch::on_ready(std::uint32_t) {
  for (int i = 0; i < kMaxPerTurn; ++i) {
    const int r = read_one();
    if (r == 0) return;
    if (r < 0) {
      // The set keeps what it has (every address it knows stays reserved).
      events_.emit("host_address",
                   {{"reason", "reading address changes failed"}, {"error", std::strerror(errno)}});
      return;
    }
  }
  loop_.wake_next_turn(handle_);
}

}  // namespace abox::netstack
