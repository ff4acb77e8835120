#include "netstack/stack/tcp_flow.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <string>

#include "base/broker_handoff.h"
#include "lwip/pbuf.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/tcp.h"
#include "netstack/stack/admission.h"
#include "netstack/stack/flow_services.h"
#include "netstack/stack/host_tcp_info.h"
#include "netstack/stack/name_peek.h"
#include "netstack/stack/sockaddr.h"

namespace abox::netstack {

namespace {

// lwIP keeps both families in network order.
policy::IpAddress from_lwip(const ip_addr_t& a) {
  if (IP_IS_V6_VAL(a)) {
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), ip_2_ip6(&a)->addr, 16);
    return policy::IpAddress::v6(b);
  }
  std::uint8_t b[4];
  std::memcpy(b, &ip_2_ip4(&a)->addr, 4);
  return policy::IpAddress::v4_bytes(b);
}

err_t recv_cb(void* arg, tcp_pcb*, pbuf* p, err_t) {
  auto* f = static_cast<TcpFlow*>(arg);
  f->on_guest_data(p);
  return f->aborted() ? ERR_ABRT : ERR_OK;
}
err_t sent_cb(void* arg, tcp_pcb*, u16_t len) {
  auto* f = static_cast<TcpFlow*>(arg);
  f->on_guest_sent(len);
  return f->aborted() ? ERR_ABRT : ERR_OK;
}
void err_cb(void* arg, err_t err) {
  static_cast<TcpFlow*>(arg)->on_guest_error(err == ERR_CLSD);
}
err_t connected_cb(void* arg, tcp_pcb*, err_t) {
  auto* f = static_cast<TcpFlow*>(arg);
  f->on_guest_connected();
  return f->aborted() ? ERR_ABRT : ERR_OK;
}

ip_addr_t to_lwip(const policy::IpAddress& a) {
  ip_addr_t out{};
  if (a.is_v6()) {
    IP_SET_TYPE_VAL(out, IPADDR_TYPE_V6);
    std::memcpy(ip_2_ip6(&out)->addr, a.bytes().data(), 16);
  } else {
    IP_SET_TYPE_VAL(out, IPADDR_TYPE_V4);
    std::memcpy(&ip_2_ip4(&out)->addr, a.bytes().data(), 4);
  }
  return out;
}

}  // namespace

TcpFlow::TcpFlow(FlowServices& stack, tcp_pcb* pcb, bool needs_name, std::string name,
                 const policy::BrokerBinding* broker, bool audited)
    : stack_(stack),
      pcb_(pcb),
      dst_{from_lwip(pcb->local_ip), pcb->local_port},
      src_{from_lwip(pcb->remote_ip), pcb->remote_port},
      name_(std::move(name)),
      broker_(broker),
      state_(needs_name && broker == nullptr ? State::peeking : State::connecting),
      audited_(audited) {}

TcpFlow::TcpFlow(FlowServices& stack, tcp_pcb* pcb, Inbound inbound)
    : stack_(stack),
      pcb_(pcb),
      dst_(inbound.guest),
      src_(inbound.peer),
      broker_(nullptr),
      state_(State::connecting),
      host_(std::move(inbound.host)),
      inbound_live_(inbound.live),
      published_(std::move(inbound.published)) {
  ++*inbound_live_;
}

TcpFlow::~TcpFlow() {
  if (inbound_live_ != nullptr) {
    --*inbound_live_;
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("inbound_closed", {{"reason", end_reason_},
                                                        {"published", published_},
                                                        {"peer", src_.to_string()},
                                                        {"bytes_to_guest", bytes_in_},
                                                        {"bytes_from_guest", bytes_out_},
                                                        {"proto", "tcp"}});
  }
  if (handle_ != io::EventLoop::kNoHandle) stack_.loop().unwatch(handle_);
  // What the host socket's TCP counted, before it closes (host_tcp_info.h);
  // the broker's socket is a unix one.
  if (host_ && broker_ == nullptr) {
    if (const auto info = read_host_tcp_info(host_.get())) {
      stack_.mutable_counters().host_tcp_retransmits += info->retransmits;
      stack_.mutable_counters().host_tcp_out_of_order += info->out_of_order_received;
    }
  }
  // A send still queued points into to_host_ and names host_'s fd: it is
  // handed to the kernel (which copies the bytes at once) and its
  // completion taken here, before either goes.
  stack_.loop().cancel_all(&host_send_, sends_in_flight_);
  if (to_host_ != nullptr) pbuf_free(to_host_);
  if (pcb_ != nullptr) {
    detach_pcb();
    tcp_abort(pcb_);
  }
}

void TcpFlow::detach_pcb() {
  tcp_arg(pcb_, nullptr);
  tcp_recv(pcb_, nullptr);
  tcp_sent(pcb_, nullptr);
  tcp_err(pcb_, nullptr);
}

TcpFlow::Phase TcpFlow::phase() const {
  if (broker_ != nullptr) return Phase::brokered;
  switch (state_) {
    case State::peeking:
      return Phase::peeking;
    case State::connecting:
      return Phase::connecting;
    case State::open:
      return guest_fin_ || host_eof_ ? Phase::closing : Phase::open;
    case State::done:
      break;
  }
  return Phase::closing;  // retired at once: a live table never holds one
}

void TcpFlow::start() {
  tcp_arg(pcb_, this);
  tcp_recv(pcb_, recv_cb);
  tcp_sent(pcb_, sent_cb);
  tcp_err(pcb_, err_cb);
  tcp_nagle_disable(pcb_);  // the host side already coalesces; don't add delay
  limit_guest_window();
  last_activity_ = stack_.loop().now();
  if (state_ == State::peeking) {
    deadline_ = last_activity_ + base::Millis(stack_.policy().timeouts().peek_ms);
    return;
  }
  connect_host();
}

bool TcpFlow::start_inbound() {
  tcp_arg(pcb_, this);
  tcp_recv(pcb_, recv_cb);
  tcp_sent(pcb_, sent_cb);
  tcp_err(pcb_, err_cb);
  const ip_addr_t gateway = to_lwip(stack_.config().gateway);
  const ip_addr_t guest = to_lwip(dst_.address);
  last_activity_ = stack_.loop().now();
  deadline_ = last_activity_ + base::Millis(stack_.policy().timeouts().connect_ms);
  if (tcp_bind(pcb_, &gateway, 0) != ERR_OK || tcp_connect(pcb_, &guest, dst_.port, connected_cb) != ERR_OK) {
    end_reason_ = "no room in the stack for the connection to the guest";
    abort_both(end_reason_);
    return false;
  }
  // The window limit waits for the guest's SYN-ACK (on_guest_connected()):
  // lwIP sets rcv_wnd to its whole TCP_WND when that SYN-ACK asks for window
  // scaling, and asserts that nothing changed it before.
  return true;
}

// [limits] flow_buffer_bytes, guest to host: the guest may be at most this
// far ahead of what the host socket took (tcp_recved() reopens the window
// only as the host takes bytes). Called once the handshake is done (lwIP has
// read the guest's window scale option), before anything was received. Our
// SYN or SYN-ACK offered at most 65535 bytes (a SYN's window is never
// scaled), so a limit above that takes back nothing already offered.
//
// lwIP notes the right edge of the window its SYN-ACK offered as rcv_nxt
// plus its whole receive window (TCP_WND, 4 MiB, once the guest's SYN asked
// for window scaling), though the SYN-ACK's window field said at most 65535.
// From that edge lwIP "keeps the right edge constant"
// (tcp_update_rcv_ann_wnd()): it would go on announcing up to 4 MiB after
// rcv_wnd was cut to the limit, and trim away whatever the guest sent past
// rcv_wnd; the guest then retransmits it after a timeout, again and again
// while the host side is behind. So the edge is put back where the SYN-ACK
// really left it.
void TcpFlow::limit_guest_window() {
  const auto limit =
      static_cast<tcpwnd_size_t>(std::min<std::size_t>(stack_.policy().limits().flow_buffer_bytes, TCP_WND));
  if (pcb_->rcv_wnd > limit) pcb_->rcv_wnd = limit;
  if (pcb_->rcv_ann_wnd > limit) pcb_->rcv_ann_wnd = limit;
  const u32_t offered = pcb_->rcv_nxt + 0xFFFF;
  if (TCP_SEQ_GT(pcb_->rcv_ann_right_edge, offered)) pcb_->rcv_ann_right_edge = offered;
}

void TcpFlow::on_guest_connected() {
  if (state_ != State::connecting || pcb_ == nullptr) return;
  state_ = State::open;
  last_activity_ = stack_.loop().now();
  limit_guest_window();
  tcp_nagle_disable(pcb_);
  int one = 1;
  ::setsockopt(host_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  watching_ = POLLIN | POLLRDHUP;
  handle_ = stack_.loop().watch(host_.get(), watching_, this);
  // Whatever the host peer sent while the guest was answering.
  read_from_host();
  if (state_ == State::done) return;
  update_watch();
}

// The broker's socket: the hand-off line goes ahead of the guest's bytes.
bool TcpFlow::open_broker_socket() {
  auto line =
      base::encode_handoff({stack_.config().instance, broker_->name, dst_.port, dst_.address.to_string()});
  const std::string& path = stack_.config().broker_path;
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  if (!line.ok() || path.size() >= sizeof sun.sun_path) {
    if (stack_.events().reserve_line())
      stack_.events().write_reserved(
          "flow", {{"reason", "cannot hand the flow to the broker"},
                   {"error", line.ok() ? "socket path too long" : base::describe(line.error())},
                   {"name", name_},
                   {"proto", "tcp"}});
    abort_both("broker hand-off");
    return false;
  }
  handoff_ = std::move(line.value());
  std::memcpy(sun.sun_path, path.data(), path.size());
  host_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!host_) {
    abort_both("broker socket failed");
    return false;
  }
  // A unix connect completes at once or fails at once (EAGAIN: the broker's
  // backlog is full); either way the POLLOUT below reports it.
  int rc = ::connect(host_.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun);
  if (rc < 0 && errno != EINPROGRESS) {
    ++stack_.mutable_counters().connect_failed;
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("flow", {{"reason", "broker unreachable"},
                                              {"error", std::strerror(errno)},
                                              {"name", name_},
                                              {"dst", dst_.to_string()},
                                              {"proto", "tcp"}});
    abort_both("broker unreachable");
    return false;
  }
  return true;
}

void TcpFlow::connect_host() {
  state_ = State::connecting;
  if (broker_ != nullptr) {
    if (!open_broker_socket()) return;
    deadline_ = stack_.loop().now() + base::Millis(stack_.policy().timeouts().connect_ms);
    watching_ = POLLOUT;
    handle_ = stack_.loop().watch(host_.get(), POLLOUT, this);
    return;
  }
  sockaddr_storage ss{};
  socklen_t len = to_sockaddr(dst_, ss);
  host_.reset(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!host_) {
    abort_both("host socket failed");
    return;
  }
  int one = 1;
  ::setsockopt(host_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = ::connect(host_.get(), reinterpret_cast<sockaddr*>(&ss), len);
  if (rc < 0 && errno != EINPROGRESS) {
    ++stack_.mutable_counters().connect_failed;
    abort_both("connect failed");
    return;
  }
  deadline_ = stack_.loop().now() + base::Millis(stack_.policy().timeouts().connect_ms);
  watching_ = POLLOUT;
  handle_ = stack_.loop().watch(host_.get(), POLLOUT, this);
}

void TcpFlow::on_connected() {
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(host_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    ++stack_.mutable_counters().connect_failed;
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("flow", {{"reason", "connect failed"},
                                              {"error", std::strerror(err)},
                                              {"name", name_},
                                              {"dst", dst_.to_string()},
                                              {"proto", "tcp"}});
    abort_both("connect failed");
    return;
  }
  state_ = State::open;
  flush_to_host();
  if (state_ == State::done) return;
  update_watch();
}

void TcpFlow::on_ready(std::uint32_t events) {
  if (state_ == State::done || !host_) return;
  last_activity_ = stack_.loop().now();
  if (state_ == State::connecting) {
    if (events & (POLLOUT | POLLERR | POLLHUP)) on_connected();
    return;
  }
  if (events & (POLLRDHUP | POLLHUP | POLLERR)) host_closing_ = true;
  if (events & POLLOUT) flush_to_host();
  if (state_ == State::done) return;
  if (events & (POLLIN | POLLRDHUP | POLLERR | POLLHUP)) read_from_host();
  if (state_ == State::done) return;
  update_watch();
  finish_if_done();
}

void TcpFlow::update_watch() {
  if (!host_ || handle_ == io::EventLoop::kNoHandle) return;
  std::uint32_t want = 0;
  // POLLOUT only while bytes wait with no send in flight (the socket was
  // full): a writable socket would otherwise wake every turn.
  if ((to_host_bytes_ > 0 || !handoff_.empty()) && sends_in_flight_ == 0) want |= POLLOUT;
  if (!host_eof_ && !host_paused_) want |= POLLIN | POLLRDHUP;
  if (want != watching_) {
    stack_.loop().modify(handle_, want == 0 ? POLLERR : want);
    watching_ = want;
  }
}

void TcpFlow::on_guest_data(pbuf* p) {
  last_activity_ = stack_.loop().now();
  if (p == nullptr) {  // the guest sent FIN
    guest_fin_ = true;
    if (state_ == State::peeking) {
      abort_both("guest closed before sending a name");
      return;
    }
    flush_to_host();
    finish_if_done();
    return;
  }
  if (to_host_ == nullptr) {
    to_host_ = p;
  } else {
    pbuf_cat(to_host_, p);
  }
  to_host_bytes_ += p->tot_len;
  if (state_ == State::peeking) {
    peek();
    return;
  }
  // Checked before any of it is sent: a refusal aborts the flow, and these
  // bytes go with it.
  if (follower_ && !follower_->opaque() && !follow(p)) return;
  if (state_ == State::open) {
    flush_to_host();
    if (state_ != State::done) update_watch();
  }
}

void TcpFlow::peek() {
  std::size_t limit = stack_.policy().limits().peek_bytes;
  std::size_t take = std::min<std::size_t>(to_host_bytes_, limit);
  peeked_.resize(take);
  pbuf_copy_partial(to_host_, peeked_.data(), static_cast<u16_t>(std::min<std::size_t>(take, 0xFFFF)), 0);
  PeekResult r = peek_name(peeked_, limit);
  if (r.status == PeekStatus::need_more && to_host_bytes_ < limit) return;
  if (r.status != PeekStatus::tls_sni && r.status != PeekStatus::http_host) {
    std::string why = "no acceptable name in the first bytes: " + std::string(to_string(r.status));
    if (r.error != PeekError::none) why += std::string(" (") + std::string(describe(r.error)) + ")";
    if (stack_.audit()) {
      // Audit mode: said, and the flow goes on unchecked.
      stack_.would_deny(why, "tcp", dst_, name_);
      peeked_.clear();
      peeked_.shrink_to_fit();
      connect_host();
      return;
    }
    refuse_name(why, r.status == PeekStatus::tls_ech ? r.name.view() : std::string_view());
    return;
  }
  auto check = check_peeked_name(stack_.policy(), stack_.answer_table(), dst_.address, dst_.port,
                                 r.name.view(), stack_.loop().now());
  if (check != NameCheck::ok) {
    if (!stack_.audit()) {
      refuse_name(describe(check), r.name.view());
      return;
    }
    stack_.would_deny(std::string(describe(check)) + " (" + std::string(r.name.view()) + ")", "tcp", dst_,
                      name_);
  }
  peeked_.clear();
  peeked_.shrink_to_fit();
  // Audit mode follows no later request: it says what the policy would
  // refuse, and a request it would refuse later is let through unnamed.
  if (r.status == PeekStatus::http_host && !stack_.audit()) {
    // From the flow's first byte: the first request is read again, and
    // whatever the guest pipelined behind it in the held bytes is checked
    // before any of it goes.
    follower_ = std::make_unique<HttpRequestFollower>(limit);
    if (!follow(to_host_)) return;
  }
  connect_host();
}

void TcpFlow::refuse_name(std::string_view why, std::string_view shown) {
  ++stack_.mutable_counters().name_refused;
  if (stack_.events().reserve_line())
    stack_.events().write_reserved(
        "deny",
        {{"reason", why}, {"name", name_}, {"peeked", shown}, {"dst", dst_.to_string()}, {"proto", "tcp"}});
  abort_both("name check failed");
}

bool TcpFlow::follow(const pbuf* chain) {
  for (const pbuf* q = chain; q != nullptr; q = q->next) {
    std::span<const std::uint8_t> in(static_cast<const std::uint8_t*>(q->payload), q->len);
    while (!in.empty()) {
      const FollowStep step = follower_->feed(in);
      if (step.kind == FollowStep::Kind::refused) {
        refuse_name(
            "request " + std::to_string(follower_->requests() + 1) + " on the flow: " + describe(step),
            step.peek.name.view());
        return false;
      }
      if (step.kind == FollowStep::Kind::request) {
        const auto check = check_peeked_name(stack_.policy(), stack_.answer_table(), dst_.address, dst_.port,
                                             step.name.view(), stack_.loop().now());
        if (check != NameCheck::ok) {
          refuse_name("request " + std::to_string(follower_->requests()) +
                          " on the flow: " + std::string(describe(check)),
                      step.name.view());
          return false;
        }
      }
      in = in.subspan(step.consumed);
    }
  }
  return true;
}

void TcpFlow::flush_to_host() {
  if (state_ != State::open || sends_in_flight_ != 0) return;
  while (!handoff_.empty() || (to_host_ != nullptr && to_host_bytes_ > 0)) {
    std::size_t n = 0;
    if (!handoff_.empty()) send_iov_[n++] = {handoff_.data(), handoff_.size()};
    for (pbuf* q = to_host_; q != nullptr && n < send_iov_.size(); q = q->next) {
      if (q->len == 0) continue;
      send_iov_[n++] = {q->payload, q->len};
    }
    send_msg_ = {};
    send_msg_.msg_iov = send_iov_.data();
    send_msg_.msg_iovlen = n;
    if (stack_.host_sends_on_ring()) {
      // MSG_DONTWAIT: the request never waits for room (so it is done when
      // submitted); a full socket answers EAGAIN or takes part.
      io_uring_sqe* s = stack_.loop().request(&host_send_, /*done_at_submit=*/true);
      io_uring_prep_sendmsg(s, host_.get(), &send_msg_, MSG_DONTWAIT | MSG_NOSIGNAL);
      ++sends_in_flight_;
      return;
    }
    ssize_t sent = ::sendmsg(host_.get(), &send_msg_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // POLLOUT wakes us
      if (errno == EINTR) continue;
      abort_both("host send failed");
      return;
    }
    took_from_guest(static_cast<std::size_t>(sent));
  }
  if (guest_fin_ && handoff_.empty() && to_host_bytes_ == 0 && !host_shut_wr_ && host_) {
    ::shutdown(host_.get(), SHUT_WR);
    host_shut_wr_ = true;
  }
}

void TcpFlow::took_from_guest(std::size_t done) {
  if (!handoff_.empty()) {
    const std::size_t line = std::min(done, handoff_.size());
    handoff_.erase(0, line);
    done -= line;
  }
  to_host_bytes_ -= done;
  // What the guest was last told it may send (0 when it sent past that).
  const u32_t announced = pcb_ != nullptr && TCP_SEQ_GT(pcb_->rcv_ann_right_edge, pcb_->rcv_nxt)
                              ? pcb_->rcv_ann_right_edge - pcb_->rcv_nxt
                              : 0;
  stack_.spend(budget_rule_, done);
  bytes_out_ += done;
  // Free what the host took and open the guest's window by as much.
  while (done > 0) {
    auto step = static_cast<u16_t>(std::min<std::size_t>(done, 0xFFFF));
    to_host_ = pbuf_free_header(to_host_, step);
    if (pcb_ != nullptr) tcp_recved(pcb_, step);
    done -= step;
  }
  // lwIP announces a reopened window by itself only once its right edge
  // moved by TCP_WND_UPDATE_THRESHOLD (4 x TCP_MSS = 256 KiB here). A guest
  // told there was no room for a segment would wait for its zero-window
  // probe, which Linux backs off up to two minutes: once there is room for
  // one, say so now (RFC 1122 4.2.3.3). Inside lwIP's input the update
  // rides on the ACK that input sends anyway (tcp_output() defers).
  if (pcb_ != nullptr && announced < pcb_->mss && pcb_->rcv_ann_wnd >= pcb_->mss) {
    tcp_ack_now(pcb_);
    tcp_output(pcb_);
  }
}

void TcpFlow::on_host_sent(int res) {
  --sends_in_flight_;
  if (state_ != State::open) return;  // aborted meanwhile: the bytes go with the flow
  last_activity_ = stack_.loop().now();
  if (res == -EAGAIN || res == -EINTR) {
    update_watch();  // POLLOUT resumes
    return;
  }
  if (res < 0) {
    abort_both("host send failed");
    return;
  }
  std::size_t offered = 0;
  for (std::size_t i = 0; i < send_msg_.msg_iovlen; ++i) offered += send_iov_[i].iov_len;
  took_from_guest(static_cast<std::size_t>(res));
  // All of it: send what came meanwhile (or the FIN). Part: the socket is
  // full, POLLOUT resumes.
  if (static_cast<std::size_t>(res) == offered) flush_to_host();
  if (state_ == State::done) return;
  update_watch();
  finish_if_done();
}

// Each read goes into to_guest_'s tail and is queued with a no-copy
// tcp_write: at most what lwIP's send buffer has room for, and at most what
// its segment queue can take (a no-copy segment uses two queue entries, and
// one more when lwIP extends the last segment), so that tcp_write never
// fails for room after the bytes have left the host socket.
namespace {
// Reads below this are request/response traffic, not a bulk transfer (see
// read_from_host()).
constexpr std::size_t kSmallRead = 16 * 1024;
}  // namespace

void TcpFlow::read_from_host() {
  if (pcb_ == nullptr || host_eof_) return;
  bool drained = false;  // stopped for a reason that brings its own wake-up
  for (int round = 0; round < 16; ++round) {
    std::size_t room = std::min<std::size_t>(tcp_sndbuf(pcb_), 0xFFFF);  // tcp_write takes a u16
    const std::size_t mss = std::max<std::size_t>(tcp_mss(pcb_), 1);
    const std::size_t queued = tcp_sndqueuelen(pcb_);
    const std::size_t queue_free = TCP_SND_QUEUELEN > queued + 3 ? TCP_SND_QUEUELEN - queued - 3 : 0;
    room = std::min(room, queue_free / 2 * mss);
    // [limits] flow_buffer_bytes: what a guest that does not read can make
    // this flow hold (lwIP's send buffer alone would allow 4 MiB).
    const std::size_t limit = stack_.policy().limits().flow_buffer_bytes;
    room = std::min(room, to_guest_.held() < limit ? limit - to_guest_.held() : 0);
    if (room == 0) {
      host_paused_ = true;  // lwIP's sent callback resumes us
      drained = true;
      break;
    }
    std::span<std::uint8_t> tail = to_guest_.tail();
    const std::size_t asked = std::min(room, tail.size());
    ssize_t n = ::recv(host_.get(), tail.data(), asked, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        drained = true;  // the next arrival wakes the poll
        break;
      }
      if (errno == EINTR) continue;
      abort_both("host reset");
      return;
    }
    if (n == 0) {
      host_eof_ = true;
      tcp_shutdown(pcb_, 0, 1);  // FIN after the queued data
      guest_shut_wr_ = true;
      drained = true;
      break;
    }
    // No copy: lwIP's segments point into to_guest_ until acknowledged.
    if (tcp_write(pcb_, tail.data(), static_cast<u16_t>(n), 0) != ERR_OK) {
      abort_both("guest send queue failed");
      return;
    }
    to_guest_.commit(static_cast<std::size_t>(n));
    bytes_in_ += static_cast<std::uint64_t>(n);
    // A small read of less than asked: the socket held no more when it was
    // read, and what comes later wakes the poll again, so no read to find
    // EAGAIN (one system call per request/response round trip). A large one
    // reads on: in a bulk transfer more has usually arrived meanwhile, and a
    // read now costs less than a turn of the loop. Not once the poll said
    // the host is closing: a FIN that came with the last bytes brings no
    // wake-up of its own, and only reading on finds it (without this, the
    // e2e case replies_the_host_closes_right_behind_end_whole_with_eof stalls).
    if (static_cast<std::size_t>(n) < asked && static_cast<std::size_t>(n) < kSmallRead && !host_closing_) {
      drained = true;
      break;
    }
  }
  if (pcb_ != nullptr) tcp_output(pcb_);
  // Readiness is edge-like: a socket left with data and no new arrival would
  // never wake us again. Stopping at the round limit asks for another turn.
  if (!drained && handle_ != io::EventLoop::kNoHandle) stack_.loop().wake_next_turn(handle_);
}

void TcpFlow::on_guest_sent(std::size_t acked) {
  last_activity_ = stack_.loop().now();
  to_guest_.release(acked);
  if (host_paused_) {
    host_paused_ = false;
    read_from_host();
    if (state_ == State::done) return;
    update_watch();
  }
  finish_if_done();
}

void TcpFlow::on_guest_error(bool closed) {
  // lwIP has freed the pcb (a reset from the guest, or its timers gave up).
  pcb_ = nullptr;
  if (inbound() && state_ == State::connecting) {
    end_reason_ = "the guest refused the connection (nothing listens on its port)";
    ++stack_.mutable_counters().inbound_refused_guest;
    if (stack_.events().reserve_line())
      stack_.events().write_reserved(
          "inbound_refused",
          {{"reason", end_reason_}, {"published", published_}, {"peer", src_.to_string()}, {"proto", "tcp"}});
  } else if (inbound()) {
    end_reason_ = closed ? "closed" : "the guest reset the connection";
  }
  if (host_) {
    linger lg{1, 0};  // close with RST: carry the reset across
    ::setsockopt(host_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  state_ = State::done;
  stack_.retire(this);
}

void TcpFlow::finish_if_done() {
  if (state_ != State::open || pcb_ == nullptr) return;
  bool guest_to_host_done = guest_fin_ && host_shut_wr_;
  bool host_to_guest_done = host_eof_ && pcb_->snd_queuelen == 0 && pcb_->unacked == nullptr;
  if (!(guest_to_host_done && host_to_guest_done)) return;
  close_clean();
}

void TcpFlow::close_clean() {
  state_ = State::done;
  end_reason_ = "closed";
  if (pcb_ != nullptr) {
    detach_pcb();
    if (pcb_->state == TIME_WAIT) {
      // We closed first (the host did), so lwIP would hold the pcb for 2 MSL
      // and answer the guest's next SYN from the same port with an ACK or a
      // RST instead of taking it (lwIP has no TIME_WAIT reuse): a guest that
      // opens connections fast picks such a port within seconds and stalls
      // for a SYN retransmit. The host side has its own TIME_WAIT; this one
      // protects nothing. tcp_abort() on a TIME_WAIT pcb frees it silently.
      // It frees it without the ACK lwIP still owes the guest's FIN when
      // that FIN is what brought the pcb here (lwIP sends it only after
      // this callback returns, and it would then find no pcb): sent now,
      // or the guest sits in LAST_ACK, resends its FIN and gets a reset.
      if ((pcb_->flags & (TF_ACK_NOW | TF_ACK_DELAY)) != 0) tcp_send_empty_ack(pcb_);
      tcp_abort(pcb_);
      aborted_ = true;  // may be inside the recv callback: it returns ERR_ABRT
    } else if (tcp_close(pcb_) != ERR_OK) {
      tcp_abort(pcb_);
      aborted_ = true;
    }
    pcb_ = nullptr;
  }
  stack_.retire(this);
}

void TcpFlow::abort_both(const char* reason) {
  state_ = State::done;
  end_reason_ = reason;
  if (host_) {
    linger lg{1, 0};
    ::setsockopt(host_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  if (pcb_ != nullptr) {
    detach_pcb();
    tcp_abort(pcb_);  // RST to the guest; lwIP frees the pcb
    pcb_ = nullptr;
    aborted_ = true;
  }
  stack_.retire(this);
}

void TcpFlow::check_deadlines(base::MonoTime now) {
  if (state_ == State::done) return;
  if (inbound()) {
    check_inbound_deadlines(now);
    return;
  }
  if ((state_ == State::peeking || state_ == State::connecting) && now >= deadline_) {
    if (state_ == State::peeking) {
      ++stack_.mutable_counters().name_refused;
      if (stack_.events().reserve_line())
        stack_.events().write_reserved("deny", {{"reason", "no name within peek_ms"},
                                                {"name", name_},
                                                {"dst", dst_.to_string()},
                                                {"proto", "tcp"}});
    } else {
      ++stack_.mutable_counters().connect_failed;
      if (stack_.events().reserve_line())
        stack_.events().write_reserved(
            "flow",
            {{"reason", "connect timed out"}, {"name", name_}, {"dst", dst_.to_string()}, {"proto", "tcp"}});
    }
    abort_both("deadline");
    return;
  }
  if (stack_.host_addresses().contains(dst_.address)) {
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("flow", {{"reason", "the destination became an address of this host"},
                                              {"name", name_},
                                              {"dst", dst_.to_string()},
                                              {"proto", "tcp"}});
    abort_both("host address");
    return;
  }
  // An answer admits new flows until it expires; flows already running get
  // [dns] grace more. A guest that keeps the name answered (asks again)
  // keeps its flows; one that stopped asking loses them.
  if (!audited_ && now >= stack_.answer_table().live_until(dst_.address, name_)) {
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("flow",
                                     {{"reason", "the answer that admitted the flow expired (TTL + grace)"},
                                      {"name", name_},
                                      {"dst", dst_.to_string()},
                                      {"proto", "tcp"}});
    abort_both("expired");
    return;
  }
  if (state_ == State::open && now - last_activity_ >= base::Seconds(stack_.policy().timeouts().tcp_idle_s)) {
    if (stack_.events().reserve_line())
      stack_.events().write_reserved(
          "flow", {{"reason", "idle timeout"}, {"dst", dst_.to_string()}, {"proto", "tcp"}});
    abort_both("idle");
  }
}

}  // namespace abox::netstack

namespace abox::netstack {

// An inbound flow's destination is the guest: no answer vouches for it and
// no host address can become it. Only its own deadlines apply.
void TcpFlow::check_inbound_deadlines(base::MonoTime now) {
  if (state_ == State::connecting && now >= deadline_) {
    ++stack_.mutable_counters().inbound_refused_guest;
    if (stack_.events().reserve_line())
      stack_.events().write_reserved("inbound_refused",
                                     {{"reason", "the guest did not answer within connect_ms"},
                                      {"published", published_},
                                      {"peer", src_.to_string()},
                                      {"proto", "tcp"}});
    abort_both("the guest did not answer within connect_ms");
    return;
  }
  if (state_ == State::open && now - last_activity_ >= base::Seconds(stack_.policy().timeouts().tcp_idle_s))
    abort_both("idle timeout");
}

}  // namespace abox::netstack
