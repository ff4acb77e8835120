// EchoFlow: one admitted guest echo flow (ping): the guest's address and
// echo id → a destination address (IPv4 or IPv6), carried by an
// unprivileged ping socket of the destination's family
// (socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP) or (AF_INET6, SOCK_DGRAM,
// IPPROTO_ICMPV6)) connect()ed to the destination.
//
// The life of one ping: the guest's echo request (checked by
// parse_echo_request(), echo_message.h) reaches the flow through the stack's
// dispatch (a lookup by EchoFlowKey) and is sent on the socket as type 8
// (128) with the guest's sequence and payload; the kernel puts the socket's
// own id in (the "port" it bound) and the checksum. The destination's reply
// comes back on that socket only (the kernel matches it by that id): it is
// read on readiness, checked (parse_echo_reply(): an echo reply, the
// socket's id), and written to the guest as an echo reply from the
// destination with the guest's id and sequence and the payload as it came
// (echo_reply_frame()), straight to the link.
//
// Limits: one socket per flow, counted against [limits] flows by the stack;
// at most kRepliesPerWake replies read per wake-up (the rest next turn). The
// flow is forgotten after timeouts.icmp_idle_s without a request or reply,
// or when the answer that admitted it has expired for longer than [dns]
// grace (not in audit mode), or when its destination becomes this host's.
// Nothing is kept per sequence number: a reply with the flow's id goes to
// the guest whatever its sequence, as a kernel's own ping socket would.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/clock.h"
#include "base/result.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "policy/ip_address.h"

namespace abox::netstack {

class FlowServices;

// What tells one echo flow from another: the guest's address (an IPv6 guest
// has several), its echo id (one per ping process) and the destination.
struct EchoFlowKey {
  policy::IpAddress guest;
  std::uint16_t guest_id = 0;
  policy::IpAddress destination;
  friend bool operator==(const EchoFlowKey&, const EchoFlowKey&) = default;
};
struct EchoFlowKeyHash {
  std::size_t operator()(const EchoFlowKey& k) const noexcept;
};

class EchoFlow final : public io::EventLoop::Watcher, public io::EventLoop::Deletable {
 public:
  // name: the answered name that admitted the flow. guest_mac: where its
  // replies go on the link. audited: admitted only because audit mode lets
  // through what the policy would refuse (no answer expiry ends it).
  EchoFlow(FlowServices& stack, const EchoFlowKey& key, const std::array<std::uint8_t, 6>& guest_mac,
           std::string name, bool audited = false);
  ~EchoFlow() override;
  EchoFlow(const EchoFlow&) = delete;
  EchoFlow& operator=(const EchoFlow&) = delete;

  // Makes and connects the ping socket; the errno when it cannot be made
  // (EACCES: ping sockets not permitted to this group, ping_group_range).
  base::Result<void, int> start();
  // The guest's echo request (its own id is the key's).
  void from_guest(std::uint16_t sequence, std::span<const std::uint8_t> payload);
  void on_ready(std::uint32_t events) override;
  // One datagram read from the socket: relayed if it is a reply to this
  // flow (false: dropped, counted).
  bool from_host(std::span<const std::uint8_t> message);
  void check_idle(base::MonoTime now);
  void cut();

  const EchoFlowKey& key() const { return key_; }
  const std::string& name() const { return name_; }
  const policy::IpAddress& destination() const { return key_.destination; }
  bool finished() const { return retired_; }
  // Requests and replies so far, and their payload bytes (for the `close` event).
  std::uint64_t requests() const { return requests_; }
  std::uint64_t replies() const { return replies_; }
  std::uint64_t bytes_out() const { return bytes_out_; }
  std::uint64_t bytes_in() const { return bytes_in_; }
  // The socket's echo id (its bound "port"); 0 until known.
  std::uint16_t host_id() const { return host_id_; }

  static constexpr int kRepliesPerWake = 16;

 private:
  FlowServices& stack_;
  EchoFlowKey key_;
  std::array<std::uint8_t, 6> guest_mac_;
  std::string name_;
  base::UniqueFd host_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  base::MonoTime last_activity_{};
  std::uint16_t host_id_ = 0;
  bool retired_ = false;
  bool audited_ = false;
  std::uint64_t requests_ = 0;
  std::uint64_t replies_ = 0;
  std::uint64_t bytes_out_ = 0;
  std::uint64_t bytes_in_ = 0;
};

}  // namespace abox::netstack
