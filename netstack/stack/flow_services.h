// FlowServices: what a TCP, UDP or echo flow gets from the stack that owns it,
// and nothing more: the loop, the policy, the event log, the answer table,
// this host's addresses, the counters, the stack's configuration, and the
// ways a flow ends (retire()) or hands a ring receive over. GuestStack is
// the one implementation; a flow includes this header, never the stack's,
// so tcp_flow and guest_stack no longer include each other and a test may
// drive a flow with a stack of its own making.
//
// Everything runs on the loop's thread. What the accessors return lives as
// long as the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "base/event_log.h"
#include "dns/answer_table.h"
#include "io/event_loop.h"
#include "netstack/stack/guest_config.h"
#include "netstack/stack/stack_counters.h"
#include "policy/host_addresses.h"
#include "policy/policy.h"

struct netif;
struct udp_pcb;

namespace abox::io {
class ReceiveBufferPool;
class RingWriter;
}  // namespace abox::io

namespace abox::netstack {

class TcpFlow;
class UdpFlow;
class EchoFlow;
class HostReceive;

class FlowServices {
 public:
  virtual io::EventLoop& loop() = 0;
  virtual const policy::Policy& policy() const = 0;
  virtual base::EventLog& events() = 0;
  virtual dns::AnswerTable& answer_table() = 0;
  virtual const policy::HostAddresses& host_addresses() const = 0;
  virtual StackCounters& mutable_counters() = 0;
  virtual const GuestConfig& config() const = 0;
  // Audit mode (policy.h, Mode): what the policy would refuse goes on, and
  // would_deny() counts and logs it (a `would_deny` event with `reason`,
  // `name`, `dst`, `proto` and "audit": true).
  virtual bool audit() const = 0;
  virtual void would_deny(std::string_view reason, std::string_view proto, const policy::Endpoint& dst,
                          std::string_view name) = 0;
  // Egress budgets ([[allow]] max_bytes_out): `bytes` the guest sent through
  // a flow admitted by rule `rule` (kNoBudget: none) left for the host. A
  // budget crossed cuts the rule's flows at the end of the turn.
  static constexpr std::size_t kNoBudget = static_cast<std::size_t>(-1);
  virtual void spend(std::size_t rule, std::uint64_t bytes) = 0;

  // A flow is finished: destroy it at the end of this loop turn (it may be
  // inside its own callback now).
  virtual void retire(TcpFlow* flow) = 0;
  virtual void retire(UdpFlow* flow) = 0;
  virtual void retire(EchoFlow* flow) = 0;

  // Echo flows: a whole frame the flow built (echo_message.h) straight to
  // the guest's link, past lwIP; false when the link did not take it.
  virtual bool send_to_guest(std::span<const std::uint8_t> frame) = 0;

  // UDP flows: the guest's lwIP interface; the pcb that answers the guest
  // from dst (either family), shared by every flow to it and
  // counted (released by each flow); ring writes and receives for host
  // sockets (null when the stack does them by system calls); and where a
  // receive still in the kernel waits for its last completion.
  virtual netif* guest_netif() = 0;
  virtual udp_pcb* acquire_reply_pcb(const policy::Endpoint& dst) = 0;
  virtual void release_reply_pcb(const policy::Endpoint& dst) = 0;
  virtual io::RingWriter* host_datagram_writer() = 0;
  virtual bool host_sends_on_ring() const = 0;
  virtual io::ReceiveBufferPool* host_receive_pool() = 0;
  virtual void keep_until_complete(std::unique_ptr<HostReceive> receive) = 0;

 protected:
  ~FlowServices() = default;
};

}  // namespace abox::netstack
