// DnsUpstreamClient: the host-socket half of the DNS gate's sink. Each
// in-flight slot of the gate gets its own socket for each attempt: a fresh
// UDP socket connect()ed to the upstream (so a fresh random source port, and
// only that upstream's datagrams are delivered), or a TCP connection for
// answers too large for UDP (RFC 7766 framing: a 2-byte length, then the
// message). Replies and socket errors go back to the gate.
//
// Bounds: one socket per gate slot (limits.dns_in_flight); a TCP reply is
// at most 65535 bytes by construction of the framing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/unique_fd.h"
#include "dns/gate.h"
#include "io/event_loop.h"

namespace abox::netstack {

class DnsUpstreamClient {
 public:
  DnsUpstreamClient(io::EventLoop& loop, std::size_t slots);
  ~DnsUpstreamClient();
  DnsUpstreamClient(const DnsUpstreamClient&) = delete;
  DnsUpstreamClient& operator=(const DnsUpstreamClient&) = delete;

  // Must be called before the first send.
  void set_gate(dns::DnsGate* gate) { gate_ = gate; }

  void send(std::uint32_t slot, const policy::Endpoint& upstream, dns::Transport transport,
            std::span<const std::uint8_t> msg);
  void cancel(std::uint32_t slot);

  std::uint64_t socket_errors() const { return socket_errors_; }

 private:
  struct Slot;
  void on_slot_ready(std::uint32_t index, std::uint32_t events);
  void fail(std::uint32_t index);

  io::EventLoop& loop_;
  dns::DnsGate* gate_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;
  // One UDP datagram: the largest DNS message and a byte more. Left
  // uninitialized so that only the pages replies are written to become
  // resident (zeroed, it held 64 KiB of an idle instance).
  static constexpr std::size_t kRxBytes = 65535 + 2;
  std::unique_ptr<std::uint8_t[]> rx_;
  std::uint64_t socket_errors_ = 0;
};

}  // namespace abox::netstack
