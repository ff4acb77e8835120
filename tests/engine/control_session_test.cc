// The host's end of the control channel against a guest played by the test
// over a socketpair: the session's order, the MAC, the output credit, and the
// hostile streams (forged frames, lengths that lie, garbage, floods) that must
// end the session cleanly without the host holding more than one frame.
#include "engine/instance/control_session.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::engine {
namespace {

using guest::GuestMessage;
using guest::HostMessage;

std::span<const std::uint8_t> base_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

struct Recorder : ControlSession::Listener {
  std::vector<std::string> calls;
  std::string output;
  std::string closed_reason;
  bool closed = false;
  std::optional<guest::Exited> exited;
  void on_hello(const guest::Hello& h) override { calls.push_back("hello " + h.agent); }
  void on_selftest(const guest::SelftestReport& r) override {
    calls.push_back("selftest " + std::to_string(r.results.size()));
  }
  void on_started(const guest::Started& s) override { calls.push_back("started " + std::to_string(s.pid)); }
  void on_start_failed(const guest::StartFailed& f) override { calls.push_back("start_failed " + f.detail); }
  void on_output(bool is_stderr, std::span<const std::uint8_t> b) override {
    calls.push_back(is_stderr ? "stderr" : "stdout");
    output.append(b.begin(), b.end());
  }
  void on_exited(const guest::Exited& e) override {
    exited = e;
    calls.push_back("exited " + std::to_string(e.value));
  }
  void on_guest_log(std::string_view t) override { calls.push_back("log " + std::string(t)); }
  void on_stdin_credit(std::uint32_t b) override { calls.push_back("stdin_credit " + std::to_string(b)); }
  void on_forged_frame(std::string_view reason) override { calls.push_back("forged " + std::string(reason)); }
  void on_copy_in_done(const guest::CopyResult& r) override { calls.push_back("copy_in_done " + r.detail); }
  void on_copy_out_data(std::span<const std::uint8_t> b) override {
    calls.push_back("copy_out_data");
    output.append(b.begin(), b.end());
  }
  void on_copy_out_done(const guest::CopyResult& r) override { calls.push_back("copy_out_done " + r.detail); }
  void on_closed(std::string_view reason) override {
    closed = true;
    closed_reason = reason;
  }
};

class ControlSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    guest_fd_.reset(fds[1]);
    ::fcntl(guest_fd_.get(), F_SETFL, O_NONBLOCK);
    boost::asio::local::stream_protocol::socket host(io_);
    host.assign(boost::asio::local::stream_protocol(), fds[0]);
    session_ = std::make_unique<ControlSession>(std::move(host), recorder_);
    session_->start();
  }

  void raw(std::span<const std::uint8_t> bytes) {
    std::size_t at = 0;
    for (int i = 0; i < 100000 && at < bytes.size(); ++i) {
      ssize_t n = ::write(guest_fd_.get(), bytes.data() + at, bytes.size() - at);
      if (n > 0)
        at += static_cast<std::size_t>(n);
      else
        pump();  // the host reads as we go
    }
    pump();
  }
  void send(GuestMessage type, std::span<const std::uint8_t> payload) {
    std::vector<std::uint8_t> f;
    writer_.append(f, static_cast<std::uint8_t>(type), payload);
    raw(f);
  }
  template <class M>
  void send_message(GuestMessage type, const M& m) {
    std::vector<std::uint8_t> p;
    guest::encode(m, p);
    send(type, p);
  }
  // Runs whatever is ready (reads the socket, writes what is queued) until nothing is.
  void pump() {
    for (int i = 0; i < 1000; ++i) {
      io_.restart();
      if (io_.poll() == 0) return;
    }
  }
  // What the host sent, as (type, payload) in order.
  std::vector<std::pair<std::uint8_t, std::vector<std::uint8_t>>> host_frames() {
    pump();
    std::vector<std::pair<std::uint8_t, std::vector<std::uint8_t>>> out;
    for (int i = 0; i < 1000; ++i) {
      auto space = reader_.space();
      ssize_t n = ::read(guest_fd_.get(), space.data(), space.size());
      if (n <= 0) break;
      reader_.commit(static_cast<std::size_t>(n));
      for (;;) {
        auto f = reader_.next();
        if (!f.ok()) {
          ADD_FAILURE() << "host frame: " << guest::frame_error_name(f.error());
          return out;
        }
        if (!*f) break;
        out.emplace_back((*f)->type, std::vector<std::uint8_t>((*f)->payload.begin(), (*f)->payload.end()));
        if ((*f)->type == static_cast<std::uint8_t>(HostMessage::kSetup)) {
          auto s = guest::decode_setup((*f)->payload);
          EXPECT_TRUE(s);
          if (s) reader_.set_key(s->key);
        }
      }
    }
    return out;
  }
  guest::Setup setup(std::uint32_t credit = 1024, bool probes = false) {
    guest::Setup s;
    s.key.fill(0x33);
    s.argv = {"sh"};
    s.output_credit = credit;
    if (probes) s.probes = {{guest::ProbeKind::kDeniedName, "x.test"}};
    return s;
  }
  // hello, setup (no probes), without go: copies in may happen now.
  void to_running_without_go(std::uint32_t credit = 1024) {
    send_message(GuestMessage::kHello,
                 guest::Hello{guest::kProtocolVersion, "box-guest test", 1, true, "up"});
    auto s = setup(credit);
    session_->send_setup(s);
    writer_.set_key(s.key);
    host_frames();
  }
  // hello, setup, (no probes), go: the session is running.
  void to_running(std::uint32_t credit = 1024) {
    send_message(GuestMessage::kHello,
                 guest::Hello{guest::kProtocolVersion, "box-guest test", 1, true, "up"});
    auto s = setup(credit);
    session_->send_setup(s);
    writer_.set_key(s.key);
    session_->send_go();
    host_frames();
  }

  boost::asio::io_context io_;
  base::UniqueFd guest_fd_;
  Recorder recorder_;
  std::unique_ptr<ControlSession> session_;
  guest::FrameWriter writer_{guest::Direction::kGuestToHost};
  guest::FrameReader reader_{guest::Direction::kHostToGuest};
};

TEST_F(ControlSessionTest, AWholeSessionInOrder) {
  send_message(GuestMessage::kHello,
               guest::Hello{guest::kProtocolVersion, "box-guest 0.1", 1500, true, "up"});
  ASSERT_EQ(recorder_.calls, (std::vector<std::string>{"hello box-guest 0.1"}));
  auto s = setup(4096, true);
  session_->send_setup(s);
  writer_.set_key(s.key);
  guest::SelftestReport rep;
  rep.results.push_back({guest::ProbeKind::kDeniedName, guest::ProbeOutcome::kPassed, "x.test", "REFUSED"});
  send_message(GuestMessage::kSelftestReport, rep);
  session_->send_go();
  send_message(GuestMessage::kStdinCredit, guest::Credit{65536});
  send_message(GuestMessage::kStarted, guest::Started{42});
  send(GuestMessage::kStdout, base_bytes("out\n"));
  send(GuestMessage::kStderr, base_bytes("err\n"));
  send_message(GuestMessage::kExited, guest::Exited{false, 7});
  EXPECT_EQ(recorder_.calls,
            (std::vector<std::string>{"hello box-guest 0.1", "selftest 1", "stdin_credit 65536", "started 42",
                                      "stdout", "stderr", "exited 7"}));
  EXPECT_EQ(recorder_.output, "out\nerr\n");
  EXPECT_FALSE(recorder_.closed);
  EXPECT_EQ(session_->stdin_credit(), 65536u);
  EXPECT_EQ(session_->output_credit_left(), 4096u - 8);

  auto frames = host_frames();
  ASSERT_EQ(frames.size(), 2u);  // setup (unkeyed), go (keyed: it verified under setup's key)
  EXPECT_EQ(frames[0].first, static_cast<std::uint8_t>(HostMessage::kSetup));
  EXPECT_EQ(frames[1].first, static_cast<std::uint8_t>(HostMessage::kGo));
}

TEST_F(ControlSessionTest, AForgedFrameIsReportedAndDroppedAndTheSessionGoesOn) {
  to_running();
  guest::FrameWriter forger(guest::Direction::kGuestToHost);
  guest::ChannelKey wrong{};
  wrong.fill(0x34);
  forger.set_key(wrong);
  // The forger guesses the right sequence number: only the MAC gives it away.
  for (std::uint64_t i = 0; i < writer_.next_seq(); ++i) {
    std::vector<std::uint8_t> skip;
    forger.append(skip, 4, {});
  }
  std::vector<std::uint8_t> f;
  std::vector<std::uint8_t> p;
  guest::encode(guest::Exited{false, 0}, p);
  forger.append(f, static_cast<std::uint8_t>(GuestMessage::kExited), p);
  raw(f);
  EXPECT_FALSE(recorder_.exited);
  ASSERT_FALSE(recorder_.calls.empty());
  EXPECT_EQ(recorder_.calls.back(), "forged frame_bad_mac");
  EXPECT_EQ(session_->forged_frames(), 1u);
  send_message(GuestMessage::kExited, guest::Exited{false, 3});
  ASSERT_TRUE(recorder_.exited);
  EXPECT_EQ(recorder_.exited->value, 3u);
  EXPECT_FALSE(recorder_.closed);
}

TEST_F(ControlSessionTest, ManyForgedFramesEndTheSession) {
  to_running();
  std::vector<std::uint8_t> garbage_frames;
  guest::FrameWriter forger(guest::Direction::kGuestToHost);  // unkeyed: zero MACs, wrong after setup
  for (int i = 0; i <= kMaxForgedFrames; ++i) forger.append(garbage_frames, 7, base_bytes("x"));
  raw(garbage_frames);
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("failed their MAC"), std::string::npos);
  EXPECT_FALSE(session_->open());
}

TEST_F(ControlSessionTest, ALengthThatLiesEndsTheSessionWithoutReadingOn) {
  to_running();
  std::vector<std::uint8_t> huge = {0x7f, 0xff, 0xff, 0xff};
  huge.resize(4096, 'A');
  raw(huge);
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("frame_length_too_large"), std::string::npos);
}

TEST_F(ControlSessionTest, GarbageBeforeHelloEndsTheSession) {
  std::vector<std::uint8_t> garbage(1 << 16);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<std::uint8_t>(i * 131 + 7);
  raw(garbage);
  EXPECT_TRUE(recorder_.closed);
  EXPECT_TRUE(recorder_.calls.empty() || recorder_.calls[0].starts_with("forged"));
}

TEST_F(ControlSessionTest, OutputPastTheCreditEndsTheSession) {
  to_running(100);
  std::vector<std::uint8_t> chunk(60, 'o');
  send(GuestMessage::kStdout, chunk);
  EXPECT_FALSE(recorder_.closed);
  send(GuestMessage::kStdout, chunk);  // 120 > 100
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("bytes of credit"), std::string::npos);
  EXPECT_EQ(recorder_.output.size(), 60u);
}

TEST_F(ControlSessionTest, GrantedCreditLetsMoreThrough) {
  to_running(100);
  std::vector<std::uint8_t> chunk(100, 'o');
  send(GuestMessage::kStdout, chunk);
  session_->grant_output(100);
  auto frames = host_frames();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kOutputCredit));
  send(GuestMessage::kStdout, chunk);
  EXPECT_FALSE(recorder_.closed);
  EXPECT_EQ(recorder_.output.size(), 200u);
}

TEST_F(ControlSessionTest, MessagesOutOfOrderEndTheSession) {
  // Output before hello, setup and go.
  send(GuestMessage::kStdout, base_bytes("early"));
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("stdout out of order"), std::string::npos);
  EXPECT_TRUE(recorder_.output.empty());
}

TEST_F(ControlSessionTest, ASecondHelloOrAnUnaskedReportEndsTheSession) {
  send_message(GuestMessage::kHello, guest::Hello{guest::kProtocolVersion, "a", 1, true, "up"});
  send_message(GuestMessage::kHello, guest::Hello{guest::kProtocolVersion, "b", 1, true, "up"});
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("hello out of order"), std::string::npos);
}

TEST_F(ControlSessionTest, AMalformedMessageEndsTheSession) {
  send(GuestMessage::kHello, base_bytes("not a hello"));
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("malformed hello"), std::string::npos);
}

TEST_F(ControlSessionTest, TheGuestClosingMidFrameIsSaid) {
  to_running();
  std::vector<std::uint8_t> partial = {0, 0, 0, 100, 4, 0};
  raw(partial);
  guest_fd_.reset();
  pump();
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("inside a frame"), std::string::npos);
}

TEST_F(ControlSessionTest, AFloodOfValidOutputNeverExceedsTheCredit) {
  // A guest that keeps sending within its credit, the host granting as it
  // consumes: memory is one frame plus the credit, whatever the volume.
  to_running(guest::kMaxPayload);
  std::vector<std::uint8_t> chunk(guest::kMaxPayload, 'z');
  for (int i = 0; i < 64; ++i) {
    send(GuestMessage::kStdout, chunk);
    ASSERT_FALSE(recorder_.closed) << i << ": " << recorder_.closed_reason;
    recorder_.output.clear();                                          // the owner writes it out...
    session_->grant_output(static_cast<std::uint32_t>(chunk.size()));  // ...and gives the credit back
    host_frames();
  }
  EXPECT_LE(session_->output_credit_left(), guest::kMaxPayload);
}

TEST_F(ControlSessionTest, ACopyInIsAnsweredOnceItsStreamEnded) {
  to_running_without_go();
  session_->begin_copy_in("/home/agent");
  session_->send_copy_data(base_bytes("tar bytes"));
  // The answer before the end of the stream is out of order.
  send_message(GuestMessage::kCopyInDone, guest::CopyResult{true, "early"});
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("copy_in_done out of order"), std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, ACopyInRoundTrip) {
  to_running_without_go();
  session_->begin_copy_in("/home/agent");
  session_->send_copy_data(base_bytes("tar bytes"));
  session_->end_copy_in();
  auto frames = host_frames();
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[frames.size() - 3].first, static_cast<std::uint8_t>(HostMessage::kCopyIn));
  auto path = guest::decode_copy_path(frames[frames.size() - 3].second);
  ASSERT_TRUE(path);
  EXPECT_EQ(path->path, "/home/agent");
  EXPECT_EQ(frames[frames.size() - 2].first, static_cast<std::uint8_t>(HostMessage::kCopyData));
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kCopyEnd));
  send_message(GuestMessage::kCopyInDone, guest::CopyResult{true, "tar exited 0"});
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  EXPECT_EQ(recorder_.calls.back(), "copy_in_done tar exited 0");
}

TEST_F(ControlSessionTest, CopyOutDataIsBoundByItsOwnCredit) {
  to_running(1024);
  // Unasked copy data is out of order.
  send(GuestMessage::kCopyOutData, base_bytes("x"));
  EXPECT_TRUE(recorder_.closed);
}

TEST_F(ControlSessionTest, CopyOutWithinItsCreditThenPastIt) {
  to_running(1024);
  session_->begin_copy_out("/home/agent/out", 100);
  std::vector<std::uint8_t> chunk(100, 't');
  send(GuestMessage::kCopyOutData, chunk);
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  session_->grant_copy(50);
  host_frames();
  send(GuestMessage::kCopyOutData, std::span(chunk).first(50));
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  send(GuestMessage::kCopyOutData, std::span(chunk).first(1));
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("bytes of a copy with 0 bytes of credit"), std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, ACopyOutEndsWithItsResult) {
  to_running(1024);
  session_->begin_copy_out("/home/agent/out", 100);
  send(GuestMessage::kCopyOutData, base_bytes("stream"));
  send_message(GuestMessage::kCopyOutDone, guest::CopyResult{false, "tar: /home/agent/out: No such file"});
  EXPECT_FALSE(session_->copy_out_open());
  EXPECT_EQ(recorder_.calls.back(), "copy_out_done tar: /home/agent/out: No such file");
  // After the end, more data is out of order.
  send(GuestMessage::kCopyOutData, base_bytes("late"));
  EXPECT_TRUE(recorder_.closed);
}

TEST_F(ControlSessionTest, ResizeIsSentAsTheWindowSize) {
  to_running();
  session_->send_resize(50, 132);
  auto frames = host_frames();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kResize));
  auto w = guest::decode_window_size(frames.back().second);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rows, 50);
  EXPECT_EQ(w->cols, 132);
}

}  // namespace
}  // namespace abox::engine
