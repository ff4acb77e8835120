// Session: one boot's conversation with the host over the control port
// (docs/control-protocol.md), and the command's life inside it. One thread,
// one poll() loop over: the control port, a signalfd (SIGCHLD and the stop
// signals), the self-test's sockets, and the command's start-status pipe,
// stdout, stderr and stdin pipes. Timers are the self-test's deadlines. No
// call blocks: every fd is non-blocking and every loop is bounded per wake.
//
// The order, each step only after the one before:
//   hello (unkeyed) -> setup (unkeyed; carries the key: both directions are
//   keyed from here) -> CA installed -> self-test (when setup asked for
//   probes) -> selftest_report -> go -> the command starts -> started or
//   start_failed -> stdout/stderr under the output credit, stdin under the
//   stdin credit -> exited, after the command's last output.
// Then the session waits for poweroff. run() returns why it ended:
// poweroff from the host, the host closing the port, a stop signal, too
// many bad frames, or a stream that cannot be followed. The caller powers
// off.
//
// Frames from the host that fail the MAC or the sequence are dropped and
// logged (console, and a log frame once keyed); the 16th ends the session,
// as the host does for the guest's. A frame that is valid but out of place
// (go before the report, stdin without credit) is logged and ignored.
//
// When the command's main process exits, whatever it left running (a
// background job, a daemon that left its session) is killed, so its pipes
// reach EOF and `exited` can follow the last output: one command per
// instance, as with `docker run`.
//
// Bounded memory: the frame reader's one buffer; an output queue that the
// pipes and log lines stop filling at kOutputHighWater (so at most that plus
// one frame; a log line that finds it full goes to the console only); the
// stdin window (flow_control.h).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/unique_fd.h"
#include "guest/box_guest/ca_install.h"
#include "guest/box_guest/command_launcher.h"
#include "guest/box_guest/flow_control.h"
#include "guest/box_guest/network_setup.h"
#include "guest/box_guest/selftest.h"
#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

inline constexpr int kMaxBadFrames = 16;
inline constexpr std::size_t kOutputHighWater = 128 * 1024;

struct SessionConfig {
  std::string agent = "box-guest/1";
  NetworkState network;
  CaPaths ca;
  int probe_timeout_ms = 2000;
};

class Session {
 public:
  Session(base::UniqueFd control, base::UniqueFd signals, SessionConfig config, base::RandomSource& random);
  std::string run();

 private:
  enum class Phase { kAwaitSetup, kSelftest, kAwaitGo, kStarting, kRunning, kEnded };

  // Output.
  void send(std::uint8_t type, const std::vector<std::uint8_t>& payload);
  template <class M>
  void send_message(GuestMessage type, const M& m);
  void log(const std::string& text);
  void flush_control();

  // Input.
  void read_control();
  void take_frames();
  void handle_frame(const Frame& f);
  void on_setup(std::span<const std::uint8_t> payload);
  void bad_frame(std::string_view why);
  void end(std::string why);

  // The command.
  void start_command();
  void read_start_status();
  void read_output(base::UniqueFd& pipe, GuestMessage type);
  bool output_hung_up(base::UniqueFd& pipe);
  void write_stdin();
  void close_stdin_if_done();
  void reap();
  void kill_leftovers();
  void maybe_finish();
  void on_signals();

  short output_events(const base::UniqueFd& pipe) const;
  std::string phase_name() const;

  base::UniqueFd control_;
  base::UniqueFd signals_;
  SessionConfig config_;
  base::RandomSource& random_;
  FrameReader reader_{Direction::kHostToGuest};
  FrameWriter writer_{Direction::kGuestToHost};
  std::vector<std::uint8_t> out_;
  std::size_t out_head_ = 0;

  Phase phase_ = Phase::kAwaitSetup;
  std::optional<Setup> setup_;
  std::optional<Selftest> selftest_;
  CommandSpec spec_;
  LaunchedCommand command_;
  std::vector<std::uint8_t> start_status_;
  std::optional<int> wait_status_;
  OutputCredit credit_{0};
  StdinFlow stdin_;
  bool stdin_eof_ = false;
  std::size_t stdin_dropped_ = 0;

  int bad_frames_ = 0;
  std::size_t logs_dropped_ = 0;  // log lines kept off the channel by a full output queue
  std::optional<std::string> ended_;
};

}  // namespace abox::guest
