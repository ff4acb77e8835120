// ControlSession: the host's end of the guest control channel
// (docs/control-protocol.md) on one connected stream socket.
//
// It reads the guest's frames into guest::FrameReader's fixed buffer and
// decodes each with the bounded decoders of guest/protocol/messages.h, and it
// enforces the session's order: only `hello` before the key; `setup` (which
// carries the key) is sent by the owner; after it, only what the phase
// allows. Anything else ends the session with a reason (the owner's
// on_broken), as does a stream that cannot be followed (a length that lies)
// or more than kMaxForgedFrames frames whose MAC does not verify (each of
// those is reported first, then dropped).
//
// Copies have their own credit (copy_out) or the channel's own pacing
// (copy_in: queued_bytes()). Output is bounded by credit: the guest may send at most the credit the
// host gave (setup's output_credit, then grant_output()); more is a protocol
// violation. So whatever the guest does, this holds one frame in its reader
// plus at most the credit in the owner's hands. Outgoing frames queue here
// and are written in order; the owner sends stdin only within the guest's
// stdin credit (stdin_credit()).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace abox::engine {

inline constexpr int kMaxForgedFrames = 16;

class ControlSession {
 public:
  // What the guest said, on the io_context. Each is box-guest's word (its MAC
  // verified), except hello, which comes before the key.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void on_hello(const guest::Hello& hello) = 0;
    virtual void on_selftest(const guest::SelftestReport& report) = 0;
    virtual void on_started(const guest::Started& started) = 0;
    virtual void on_start_failed(const guest::StartFailed& failed) = 0;
    // One chunk of the command's stdout or stderr (the agent's own output).
    virtual void on_output(bool is_stderr, std::span<const std::uint8_t> bytes) = 0;
    virtual void on_exited(const guest::Exited& exited) = 0;
    virtual void on_guest_log(std::string_view text) = 0;
    virtual void on_stdin_credit(std::uint32_t bytes) = 0;
    virtual void on_forged_frame(std::string_view reason) = 0;
    // Files: the end of a copy_in, and a copy_out's stream (within its credit) and end.
    virtual void on_copy_in_done(const guest::CopyResult& result) = 0;
    virtual void on_copy_out_data(std::span<const std::uint8_t> bytes) = 0;
    virtual void on_copy_out_done(const guest::CopyResult& result) = 0;
    // The session is over: the guest closed the channel ("" reason) or broke the protocol.
    virtual void on_closed(std::string_view reason) = 0;
  };

  ControlSession(boost::asio::local::stream_protocol::socket socket, Listener& listener);
  ControlSession(const ControlSession&) = delete;
  ControlSession& operator=(const ControlSession&) = delete;
  ~ControlSession();

  void start();  // begins reading
  // Sends setup (unkeyed), then keys both directions with its key.
  void send_setup(const guest::Setup& setup);
  void send_go();
  void send_stdin(std::span<const std::uint8_t> bytes);  // within stdin_credit(); bytes <= kMaxPayload
  void send_stdin_eof();
  void grant_output(std::uint32_t bytes);
  void send_signal(int signo);
  void send_poweroff();
  void send_resize(std::uint16_t rows, std::uint16_t cols);
  // A copy_in: begin, the tar stream's bytes (each <= kMaxPayload), end; the
  // guest answers on_copy_in_done. One at a time, before go.
  void begin_copy_in(const std::string& guest_path);
  void send_copy_data(std::span<const std::uint8_t> bytes);
  void end_copy_in();
  // A copy_out of guest_path with `credit` bytes to start; grant_copy() as
  // the bytes are written out. One at a time.
  void begin_copy_out(const std::string& guest_path, std::uint32_t credit);
  void grant_copy(std::uint32_t bytes);
  bool copy_out_open() const { return copy_out_open_; }
  // Bytes queued for the guest and not yet written (the copy_in's pacing),
  // and what runs when the queue has emptied.
  std::size_t queued_bytes() const;
  void on_drain(std::function<void()> f) { on_drain_ = std::move(f); }
  // Closes the socket; no listener call follows.
  void close();

  std::uint64_t stdin_credit() const { return stdin_credit_; }
  std::uint64_t output_credit_left() const { return output_credit_; }
  std::uint64_t forged_frames() const { return forged_; }
  bool open() const { return open_; }

 private:
  enum class Phase { kAwaitHello, kHelloReceived, kSetupSent, kGoSent, kExited };

  void read_more();
  void handle_frames();
  bool dispatch(const guest::Frame& frame);  // false: the session broke (already reported)
  void fail(std::string reason);
  void send(guest::HostMessage type, std::span<const std::uint8_t> payload);
  void write_more();

  boost::asio::local::stream_protocol::socket socket_;
  Listener& listener_;
  guest::FrameReader reader_{guest::Direction::kGuestToHost};
  guest::FrameWriter writer_{guest::Direction::kHostToGuest};
  std::deque<std::vector<std::uint8_t>> outbox_;
  std::function<void()> on_drain_;
  bool writing_ = false;
  bool open_ = false;
  bool probes_expected_ = false;
  bool report_received_ = false;
  Phase phase_ = Phase::kAwaitHello;
  std::uint64_t output_credit_ = 0;
  std::uint64_t stdin_credit_ = 0;
  std::uint64_t forged_ = 0;
  bool copy_in_open_ = false, copy_in_ended_ = false, copy_out_open_ = false;
  std::uint64_t copy_credit_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
