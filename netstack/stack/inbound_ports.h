// InboundPorts: published ports (abox-net run --publish, policy/publish_spec.h),
// the one way in from the host to the guest. What it owns: one host socket
// per published port, opened before the sandbox (listen_published(), since
// the syscall filter allows neither bind nor listen), watched on the loop.
//
// TCP, the life of one connection:
//   the host socket is readable ── accept4 (at most kAcceptsPerTurn a turn;
//   the watch is level-triggered, so the rest come next turn)
//     the port has max_connections live flows, or the stack's flow table
//     ([limits] flows) is full ── closed at once, counted
//     (inbound_refused_limit), an `inbound_refused` event
//     else ── an `inbound_accepted` event (inbound_accepted), and an
//     inbound TcpFlow (tcp_flow.h) owned by the stack like every flow: its
//     lwIP pcb connects from the gateway to the guest's port, and from then
//     on bytes go both ways with the same backpressure, buffers, deadlines
//     and idle timeout as the guest's own flows.
// UDP, per host peer (address and port): the first datagram from a peer
// opens a session (at most max_connections per port, past that dropped and
// counted): an lwIP pcb bound to the gateway and connected to the guest's
// port. Datagrams from that peer go to the guest from it; the guest's
// replies to it go back to that peer and to no one else. A session idle for
// timeouts.udp_idle_s ends (`inbound_closed` with its byte counts).
//
// Never a way out: a published port's pcbs are connected to the guest's
// address and port, and the only host socket their bytes reach is the one
// that peer came in on; nothing the guest sends through them is admitted,
// routed or able to open a flow.
//
// Invariants: an InboundPorts outlives the stack's flows (each inbound
// TcpFlow counts itself in its port's live count: destroy the stack first),
// and its destructor touches only the loop and lwIP, never the stack;
// everything runs on the loop's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "policy/publish_spec.h"

struct udp_pcb;
struct pbuf;

namespace abox::netstack {

class GuestStack;

// A published port's host socket, bound and listening.
struct PublishedSocket {
  policy::PublishSpec spec;
  base::UniqueFd fd;
};
// Opens every spec's host socket (SO_REUSEADDR for TCP, IPV6_V6ONLY for an
// IPv6 address); the error names the spec and the reason.
base::Result<std::vector<PublishedSocket>, std::string> listen_published(
    std::span<const policy::PublishSpec> specs);

class InboundPorts {
 public:
  static constexpr std::uint32_t kDefaultMaxConnections = 64;
  static constexpr std::size_t kAcceptsPerTurn = 64;
  static constexpr std::size_t kDatagramsPerTurn = 64;

  InboundPorts(GuestStack& stack, std::vector<PublishedSocket> sockets, std::uint32_t max_connections);
  ~InboundPorts();
  InboundPorts(const InboundPorts&) = delete;
  InboundPorts& operator=(const InboundPorts&) = delete;

  // Live TCP flows and UDP sessions of the port at `index` (for tests).
  std::uint32_t live(std::size_t index) const;

  // lwIP's receive callback of a UDP session's pcb (inbound_ports.cc).
  struct UdpSession;
  void on_guest_datagram(UdpSession& session, pbuf* p);

 private:
  struct Port;
  void on_readable(Port& port);
  void accept_tcp(Port& port);
  void receive_udp(Port& port);
  void refuse(Port& port, std::string_view reason, const std::string& peer);
  void sweep_udp(base::MonoTime now);

  GuestStack& stack_;
  io::EventLoop& loop_;  // its own: the stack is gone by the time the destructor unwatches
  std::uint32_t max_connections_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<std::uint8_t> datagram_;  // one host datagram at a time
  base::MonoTime next_sweep_{};
  // Last: unregistered first.
  io::EventLoop::Registration udp_sweep_;
};

}  // namespace abox::netstack
