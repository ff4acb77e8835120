// UdpFlow: one admitted guest UDP flow (guest address and port → destination
// address and port, IPv4 or IPv6), carried by a host UDP socket of the
// destination's family connect()ed to the destination.
//
// Guest datagrams reach the flow through the stack's dispatch (a lookup by
// UdpFlowKey). Host datagrams go back to the guest
// from the destination's address and port, through a pcb the stack shares
// among all flows to that destination; one longer than the guest's MTU
// goes in IP fragments (IPv4 and IPv6), which the guest reassembles.
// The flow is forgotten after timeouts.udp_idle_s without traffic, or when
// the answer that admitted it has expired for longer than [dns] grace.
//
// Host datagrams come by a multishot receive on the loop's ring into the
// stack's io::ReceiveBufferPool (one completion per datagram, no readiness
// wake-up and no recvmmsg), or, when the stack has no pool or the receive
// keeps ending without data, by recvmmsg on readiness. A receive still in
// the kernel when the flow goes is cancelled and handed to the stack
// (HostReceive), which keeps it until its last completion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/clock.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "policy/ip_address.h"

struct pbuf;
struct udp_pcb;

namespace abox::io {
class ReceiveBufferPool;
}  // namespace abox::io

namespace abox::netstack {

class FlowServices;
class UdpFlow;

// What tells one UDP flow from another: the guest's address and port (an
// IPv6 guest has several addresses: link-local, SLAAC, privacy) and the
// destination. Compared whole: no two flows share a key, whatever the
// family.
struct UdpFlowKey {
  policy::IpAddress guest;
  std::uint16_t guest_port = 0;
  policy::Endpoint destination;
  friend bool operator==(const UdpFlowKey&, const UdpFlowKey&) = default;
};
struct UdpFlowKeyHash {
  std::size_t operator()(const UdpFlowKey& k) const noexcept;
};

// A flow's multishot receive on the ring. Owned by its flow, then by the
// stack from the flow's end until its last completion (in_flight 0).
class HostReceive final : public io::EventLoop::Completion {
 public:
  HostReceive(UdpFlow* flow, io::ReceiveBufferPool& pool) : flow_(flow), pool_(pool) {}
  void on_complete(int res, std::uint32_t cqe_flags) override;
  // Posts the multishot receive on fd (the flow's host socket).
  void post(int fd);
  void orphan() { flow_ = nullptr; }
  std::size_t in_flight = 0;  // 0 or 1: a receive is posted

 private:
  UdpFlow* flow_;
  io::ReceiveBufferPool& pool_;
};

class UdpFlow final : public io::EventLoop::Watcher, public io::EventLoop::Deletable {
 public:
  // name: the answered name that admitted the flow.
  // audited: admitted only because audit mode lets through what the policy
  // would refuse (no answer expiry ends it).
  UdpFlow(FlowServices& stack, const UdpFlowKey& key, std::string name, bool audited = false);
  ~UdpFlow() override;
  UdpFlow(const UdpFlow&) = delete;
  UdpFlow& operator=(const UdpFlow&) = delete;

  // False when the host socket or the pcb could not be made.
  bool start();
  // A datagram from the guest (consumes p).
  void from_guest(pbuf* p);
  void on_ready(std::uint32_t events) override;
  // From HostReceive: a datagram from the destination; the receive ended
  // (its last completion's result).
  void from_host(std::span<const std::uint8_t> datagram);
  void receive_ended(int res);
  void check_idle(base::MonoTime now);
  const UdpFlowKey& key() const { return key_; }
  // For a policy reload (GuestStack::apply_policy()).
  const std::string& name() const { return name_; }
  const policy::Endpoint& destination() const { return key_.destination; }
  bool finished() const { return retired_; }
  // The [[allow]] rule whose egress budget this flow spends (kNoBudget: none).
  std::size_t budget_rule() const { return budget_rule_; }
  void set_budget_rule(std::size_t rule) { budget_rule_ = rule; }
  // Datagram payload bytes so far, from the guest to the host socket and
  // back to the guest. For the flow's `close` event (GuestStack::retire()).
  std::uint64_t bytes_out() const { return bytes_out_; }
  std::uint64_t bytes_in() const { return bytes_in_; }
  // Cut by a reload: the host socket closes with the flow, retired now. The
  // caller has counted and logged it.
  void cut();

 private:
  FlowServices& stack_;
  UdpFlowKey key_;
  std::string name_;
  base::UniqueFd host_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  udp_pcb* pcb_ = nullptr;  // shared, owned by the stack
  base::MonoTime last_activity_{};
  bool retired_ = false;
  bool audited_ = false;
  std::size_t budget_rule_ = static_cast<std::size_t>(-1);
  std::uint64_t bytes_out_ = 0;
  std::uint64_t bytes_in_ = 0;
  bool queued_on_ring_ = false;           // a datagram went to the host writer (see ~UdpFlow)
  std::unique_ptr<HostReceive> receive_;  // null: read on readiness
  unsigned receives_without_data_ = 0;    // consecutive ends of the ring receive
};

}  // namespace abox::netstack
