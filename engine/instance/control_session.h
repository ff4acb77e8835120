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
// Command sessions (protocol 3): the main command is session 0 (setup's
// output credit, go); open_exec() opens another with an id the owner picks
// (1 and up, never twice). Each open session has its own output credit and
// stdin credit here. A session is open from setup (0) or open_exec() until
// its end arrived (exited or start_failed; the main one stays in the table).
// A guest frame naming a session that is not open (a guest that lies, or
// one late for an exec that ended) is dropped and counted
// (unknown_session_frames()), the owner hears of it (on_unknown_session)
// and every other session goes on; the owner's sends for a session that is
// not open are dropped too (a grant racing the session's end).
//
// Copies have their own credit (copy_out) or the channel's own pacing
// (copy_in: queued_bytes()). Output is bounded by credit: the guest may send
// at most the credit the host gave a session (setup's or exec's
// output_credit, then grant_output()); more is a protocol violation. So
// whatever the guest does, this holds one frame in its reader plus at most
// each session's credit in the owner's hands. Outgoing frames queue here
// and are written in order; the owner sends stdin only within the guest's
// stdin credit for that session (stdin_credit()).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/instance/exec_multiplexer.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace abox::engine {

inline constexpr int kMaxForgedFrames = 16;
// The most stdin credit a session's count holds, however much the guest grants.
inline constexpr std::uint64_t kMaxStdinCredit = 16u << 20;

class ControlSession final : public ExecChannel {
 public:
  // What the guest said, on the io_context. Each is box-guest's word (its MAC
  // verified), except hello, which comes before the key.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void on_hello(const guest::Hello& hello) = 0;
    virtual void on_selftest(const guest::SelftestReport& report) = 0;
    // A command session's start, end and output (each names its session).
    virtual void on_started(const guest::Started& started) = 0;
    virtual void on_start_failed(const guest::StartFailed& failed) = 0;
    // One chunk of a command's stdout or stderr (the agent's own output).
    virtual void on_output(std::uint32_t session, bool is_stderr, std::span<const std::uint8_t> bytes) = 0;
    virtual void on_exited(const guest::Exited& exited) = 0;
    virtual void on_guest_log(std::string_view text) = 0;
    virtual void on_stdin_credit(std::uint32_t session, std::uint32_t bytes) = 0;
    virtual void on_forged_frame(std::string_view reason) = 0;
    // A frame (its type's name) for a session that is not open: dropped.
    virtual void on_unknown_session(std::string_view message, std::uint32_t session) = 0;
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
  ~ControlSession() override;

  void start();  // begins reading
  // Sends setup (unkeyed), then keys both directions with its key.
  void send_setup(const guest::Setup& setup);
  void send_go();
  // Opens exec.session (not 0, not open, never used before in this channel:
  // false otherwise, and nothing is sent).
  bool open_exec(const guest::Exec& exec) override;
  // The per-session sends do nothing for a session that is not open.
  // stdin: within stdin_credit(session); bytes <= kMaxStreamBytes.
  void send_stdin(std::uint32_t session, std::span<const std::uint8_t> bytes) override;
  void send_stdin_eof(std::uint32_t session) override;
  void grant_output(std::uint32_t session, std::uint32_t bytes) override;
  void send_signal(std::uint32_t session, int signo) override;
  void send_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols) override;
  void send_poweroff();
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

  std::uint64_t stdin_credit(std::uint32_t session) const override;
  std::uint64_t output_credit_left(std::uint32_t session) const;
  bool session_open(std::uint32_t session) const { return sessions_.count(session) != 0; }
  std::uint64_t forged_frames() const { return forged_; }
  std::uint64_t unknown_session_frames() const { return unknown_session_frames_; }
  bool open() const { return open_; }

 private:
  enum class Phase { kAwaitHello, kHelloReceived, kSetupSent, kGoSent, kExited };
  struct SessionCredits {
    std::uint64_t output = 0;  // what the guest may still send
    std::uint64_t stdin = 0;   // what the host may still send
    bool started = false;      // started came (exec sessions)
  };

  void read_more();
  void handle_frames();
  bool dispatch(const guest::Frame& frame);  // false: the session broke (already reported)
  bool dispatch_session(const guest::Frame& frame);
  // The open session a guest frame names; nullptr after counting and reporting it.
  SessionCredits* session_of(std::uint32_t session, std::uint8_t type);
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
  std::map<std::uint32_t, SessionCredits> sessions_;
  std::uint32_t highest_exec_ = 0;  // exec ids only grow: one is never reused
  std::uint64_t forged_ = 0;
  std::uint64_t unknown_session_frames_ = 0;
  bool copy_in_open_ = false, copy_in_ended_ = false, copy_out_open_ = false;
  std::uint64_t copy_credit_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
