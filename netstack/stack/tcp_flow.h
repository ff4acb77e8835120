// TcpFlow: one admitted guest TCP connection spliced to a host socket.
//
// Life of a flow:
//   peeking     (only when the rule requires a name) the guest's first bytes
//               are held, not acknowledged to the host side, until a TLS SNI
//               or HTTP Host is read (name_peek.h) and checked against the
//               AnswerTable (admission.h); a mismatch, a timeout or
//               peek_bytes without a decision resets the guest. A flow whose
//               first bytes are an HTTP request is followed from then on
//               (http_request_follower.h): each piece of guest bytes is read
//               before it is sent, and every request head's Host is checked
//               the same way; a mismatch, or bytes that cannot be followed,
//               reset both sides before the piece that ends the head goes.
//   connecting  a non-blocking connect to the original destination, bounded
//               by timeouts.connect_ms; failure resets the guest. A flow to
//               a [[broker]] name connects to the broker's unix socket
//               instead and sends the hand-off line (base/broker_handoff.h)
//               ahead of the guest's first byte; it is never peeked (the
//               broker checks the SNI itself).
//   open        bytes flow both ways with backpressure:
//                 guest → host: lwIP pbufs are held until send() takes them;
//                   only then tcp_recved() opens the guest's window. The
//                   send is a sendmsg request on the loop's ring (one in
//                   flight at a time; it runs when the turn's wait hands it
//                   over and never waits: a full socket takes part or
//                   nothing, and POLLOUT resumes), or a sendmsg call when
//                   the stack keeps host I/O off the ring.
//                 host → guest: the host socket is read only while lwIP has
//                   send buffer (tcp_sndbuf); otherwise POLLIN is not watched
//                   until lwIP's sent callback frees room. Bytes are read
//                   into a GuestSendBuffer and queued without copying; the
//                   sent callback releases what the guest acknowledged.
//   Half-close is carried across (guest FIN → shutdown(SHUT_WR) once the
//   queue drains; host EOF → FIN to the guest), resets too (guest RST → the
//   host socket closes with SO_LINGER 0; host reset → tcp_abort, an RST).
//   Idle flows are closed after timeouts.tcp_idle_s.
// Inbound (a published port, inbound_ports.h): the same relay the other way
// round. The host socket is one abox-net accepted on the host; the pcb is
// one it made, bound to the gateway's address and connecting to the guest's
// published port (connecting ends in lwIP's connected callback, a guest
// RST, or timeouts.connect_ms); from open on, everything above holds
// unchanged. The flow's only way out is that accepted socket: what the
// guest sends on it goes there and nowhere else. No admission, name check
// or answer expiry applies (the destination is the guest), and a reload
// leaves it alone; idle, buffer and deadline limits do apply. Its end is an
// `inbound_closed` event with the bytes each way.
// A finished flow asks the stack to retire it (deferred deletion: it may be
// inside one of its own callbacks).
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/unique_fd.h"
#include "io/event_loop.h"
#include "netstack/stack/guest_send_buffer.h"
#include "netstack/stack/http_request_follower.h"
#include "policy/ip_address.h"
#include "policy/policy.h"

struct pbuf;
struct tcp_pcb;

namespace abox::netstack {

class FlowServices;

class TcpFlow final : public io::EventLoop::Watcher, public io::EventLoop::Deletable {
 public:
  // pcb: the accepted lwIP pcb (its local address/port is the destination).
  // needs_name: peek SNI/Host before connecting. `name` is the admitting name.
  // broker: set when the flow goes to the broker (needs_name is then false).
  // audited: admitted only because audit mode lets through what the policy
  // would refuse (no answer may vouch for it: no answer expiry ends it).
  TcpFlow(FlowServices& stack, tcp_pcb* pcb, bool needs_name, std::string name,
          const policy::BrokerBinding* broker = nullptr, bool audited = false);
  // An inbound flow: `pcb` fresh from tcp_new (not bound), `inbound.host`
  // the accepted host socket. start_inbound() connects it.
  struct Inbound {
    base::UniqueFd host;
    policy::Endpoint guest;  // the guest's address and published port
    policy::Endpoint peer;   // who connected on the host
    std::string published;   // the spec, for events ("127.0.0.1:8080:80")
    // The published port's count of live flows: +1 by the constructor, -1
    // by the destructor (it outlives every flow: inbound_ports.h).
    std::uint32_t* live = nullptr;
  };
  TcpFlow(FlowServices& stack, tcp_pcb* pcb, Inbound inbound);
  ~TcpFlow() override;
  TcpFlow(const TcpFlow&) = delete;
  TcpFlow& operator=(const TcpFlow&) = delete;

  void start();
  // Inbound: binds the pcb to the gateway and connects to the guest. False
  // when lwIP refused at once (the flow is then retired, its pcb freed).
  bool start_inbound();
  bool inbound() const { return inbound_live_ != nullptr; }
  // lwIP's connected callback (inbound only).
  void on_guest_connected();
  // Periodic check: connect, peek and idle deadlines.
  void check_deadlines(base::MonoTime now);

  // lwIP callbacks (static trampolines in tcp_flow.cc call these).
  void on_guest_data(pbuf* p);
  // The guest acknowledged `acked` more bytes of what the host sent.
  void on_guest_sent(std::size_t acked);
  // closed: lwIP freed the pcb after both FINs (ERR_CLSD), not a reset.
  void on_guest_error(bool closed = false);
  // True once this flow has aborted its pcb: an lwIP callback that did so
  // must return ERR_ABRT.
  bool aborted() const { return aborted_; }

  // What the stats report a live flow as (GuestStack::flow_gauges()). One
  // each: a flow handed to the broker is `brokered` whatever its progress;
  // `closing` is an open flow one of whose sides has shut (FIN either way),
  // draining what is left.
  enum class Phase : std::uint8_t { peeking, connecting, open, closing, brokered };
  Phase phase() const;

  void on_ready(std::uint32_t events) override;

  // For a policy reload (GuestStack::apply_policy()): what the flow was
  // admitted for, and its way out.
  const std::string& name() const { return name_; }
  const policy::Endpoint& destination() const { return dst_; }
  bool brokered() const { return broker_ != nullptr; }
  bool finished() const { return state_ == State::done; }
  // The same binding in the reloaded policy (the old one goes with it).
  void follow_binding(const policy::BrokerBinding* binding) { broker_ = binding; }
  // The [[allow]] rule whose egress budget this flow spends (kNoBudget: none).
  std::size_t budget_rule() const { return budget_rule_; }
  void set_budget_rule(std::size_t rule) { budget_rule_ = rule; }
  // Payload bytes so far: the guest's the host socket took (the hand-off
  // line not counted), and the host's handed to lwIP for the guest. For
  // the flow's `close` event (GuestStack::retire()).
  std::uint64_t bytes_out() const { return bytes_out_; }
  std::uint64_t bytes_in() const { return bytes_in_; }
  // Cut by a reload: RST to the guest, the host socket closed (SO_LINGER 0),
  // the flow retired. The caller has counted and logged it.
  void cut() { abort_both("policy revoked"); }

 private:
  enum class State : std::uint8_t { peeking, connecting, open, done };

  void limit_guest_window();
  void connect_host();
  bool open_broker_socket();
  void on_connected();
  void flush_to_host();
  // What the host socket took of an offer (a ring send's result, or a
  // sendmsg's): frees it and opens the guest's window by as much.
  void took_from_guest(std::size_t bytes);
  void on_host_sent(int res);
  void read_from_host();
  void update_watch();
  void finish_if_done();
  void abort_both(const char* reason);
  void close_clean();
  void peek();
  // Reads the guest bytes of `chain` (and the pbufs after it) through the
  // follower; false when it refused them (the flow is then aborted).
  bool follow(const pbuf* chain);
  void refuse_name(std::string_view why, std::string_view shown);
  void detach_pcb();
  void check_inbound_deadlines(base::MonoTime now);

  FlowServices& stack_;
  tcp_pcb* pcb_;
  policy::Endpoint dst_;
  policy::Endpoint src_;
  std::string name_;
  const policy::BrokerBinding* broker_;
  std::string handoff_;  // the hand-off line still to send to the broker
  State state_;
  base::UniqueFd host_;
  io::EventLoop::Handle handle_ = io::EventLoop::kNoHandle;
  std::uint32_t watching_ = 0;

  // The ring send in flight (at most one): its msghdr and iovecs point into
  // handoff_ and to_host_, which keep those bytes until it completes.
  class HostSend final : public io::EventLoop::Completion {
   public:
    explicit HostSend(TcpFlow& f) : flow_(f) {}
    void on_complete(int res, std::uint32_t /*cqe_flags*/) override { flow_.on_host_sent(res); }

   private:
    TcpFlow& flow_;
  };
  HostSend host_send_{*this};
  std::size_t sends_in_flight_ = 0;
  std::array<iovec, 64> send_iov_{};
  msghdr send_msg_{};
  pbuf* to_host_ = nullptr;  // guest bytes not yet taken by the host socket
  std::size_t to_host_bytes_ = 0;
  std::vector<std::uint8_t> peeked_;  // copy of the first bytes while peeking
  // Every request of a plain-HTTP flow on a name-checked port (set when the
  // peek found one); null for every other flow.
  std::unique_ptr<HttpRequestFollower> follower_;
  GuestSendBuffer to_guest_;  // host bytes lwIP's segments point into

  bool guest_fin_ = false;      // the guest sent FIN
  bool host_shut_wr_ = false;   // we shut the host socket's write side
  bool host_eof_ = false;       // the host closed its side
  bool guest_shut_wr_ = false;  // we sent FIN to the guest
  bool host_paused_ = false;    // not reading the host: lwIP's send buffer is full
  bool host_closing_ = false;   // the poll saw POLLRDHUP/POLLHUP/POLLERR: read to the end
  bool aborted_ = false;
  bool audited_ = false;
  // Inbound flows only.
  std::uint32_t* inbound_live_ = nullptr;
  std::string published_;
  const char* end_reason_ = "closed";
  std::size_t budget_rule_ = static_cast<std::size_t>(-1);
  std::uint64_t bytes_out_ = 0;  // from the guest, taken by the host socket
  std::uint64_t bytes_in_ = 0;   // read from the host socket, queued to the guest
  base::MonoTime deadline_{};    // peek or connect deadline
  base::MonoTime last_activity_{};
};

}  // namespace abox::netstack
