// The host's end of the control channel against a guest played by the test
// over a socketpair: the session's order, the MAC, the output credit, and the
// hostile streams (forged frames, lengths that lie, garbage, floods) that must
// end the session cleanly without the host holding more than one frame.
// Command sessions (protocol 3): each exec's output, credit and end its own,
// and frames for a session that is not open dropped, counted and reported
// while every other session goes on.
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
  std::vector<std::pair<std::string, std::uint32_t>> unknown;
  void on_hello(const guest::Hello& h) override { calls.push_back("hello " + h.agent); }
  void on_selftest(const guest::SelftestReport& r) override {
    calls.push_back("selftest " + std::to_string(r.results.size()));
  }
  // Each call names its session when it is not the main one ("started 42 @1").
  static std::string at(std::uint32_t session) {
    return session == guest::kMainSession ? "" : " @" + std::to_string(session);
  }
  void on_started(const guest::Started& s) override {
    calls.push_back("started " + std::to_string(s.pid) + at(s.session));
  }
  void on_start_failed(const guest::StartFailed& f) override {
    calls.push_back("start_failed " + f.detail + at(f.session));
  }
  void on_output(std::uint32_t session, bool is_stderr, std::span<const std::uint8_t> b) override {
    calls.push_back((is_stderr ? "stderr" : "stdout") + at(session));
    output.append(b.begin(), b.end());
  }
  void on_exited(const guest::Exited& e) override {
    if (e.session == guest::kMainSession) exited = e;
    calls.push_back("exited " + std::to_string(e.value) + at(e.session));
  }
  void on_guest_log(std::string_view t) override { calls.push_back("log " + std::string(t)); }
  void on_stdin_credit(std::uint32_t session, std::uint32_t b) override {
    calls.push_back("stdin_credit " + std::to_string(b) + at(session));
  }
  void on_unknown_session(std::string_view message, std::uint32_t session) override {
    unknown.emplace_back(std::string(message), session);
  }
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
  // A session's stdout (or stderr).
  void send_output(std::uint32_t session, std::span<const std::uint8_t> bytes, bool is_stderr = false) {
    send_message(is_stderr ? GuestMessage::kStderr : GuestMessage::kStdout,
                 guest::SessionData{session, bytes});
  }
  guest::Exec exec(std::uint32_t id, std::uint32_t credit = 512) {
    guest::Exec e;
    e.session = id;
    e.argv = {"sh"};
    e.output_credit = credit;
    return e;
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
  send_message(GuestMessage::kStdinCredit, guest::SessionCredit{0, 65536});
  send_message(GuestMessage::kStarted, guest::Started{0, 42});
  send_output(0, base_bytes("out\n"));
  send_output(0, base_bytes("err\n"), /*is_stderr=*/true);
  send_message(GuestMessage::kExited, guest::Exited{0, false, 7});
  EXPECT_EQ(recorder_.calls,
            (std::vector<std::string>{"hello box-guest 0.1", "selftest 1", "stdin_credit 65536", "started 42",
                                      "stdout", "stderr", "exited 7"}));
  EXPECT_EQ(recorder_.output, "out\nerr\n");
  EXPECT_FALSE(recorder_.closed);
  EXPECT_EQ(session_->stdin_credit(0), 65536u);
  EXPECT_EQ(session_->output_credit_left(0), 4096u - 8);

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
  guest::encode(guest::Exited{0, false, 0}, p);
  forger.append(f, static_cast<std::uint8_t>(GuestMessage::kExited), p);
  raw(f);
  EXPECT_FALSE(recorder_.exited);
  ASSERT_FALSE(recorder_.calls.empty());
  EXPECT_EQ(recorder_.calls.back(), "forged frame_bad_mac");
  EXPECT_EQ(session_->forged_frames(), 1u);
  send_message(GuestMessage::kStarted, guest::Started{0, 9});
  send_message(GuestMessage::kExited, guest::Exited{0, false, 3});
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
  send_output(0, chunk);
  EXPECT_FALSE(recorder_.closed);
  send_output(0, chunk);  // 120 > 100
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("bytes of credit"), std::string::npos);
  EXPECT_EQ(recorder_.output.size(), 60u);
}

TEST_F(ControlSessionTest, GrantedCreditLetsMoreThrough) {
  to_running(100);
  std::vector<std::uint8_t> chunk(100, 'o');
  send_output(0, chunk);
  session_->grant_output(0, 100);
  auto frames = host_frames();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kOutputCredit));
  auto credit = guest::decode_session_credit(frames.back().second);
  ASSERT_TRUE(credit);
  EXPECT_EQ(credit->session, 0u);
  EXPECT_EQ(credit->bytes, 100u);
  send_output(0, chunk);
  EXPECT_FALSE(recorder_.closed);
  EXPECT_EQ(recorder_.output.size(), 200u);
}

TEST_F(ControlSessionTest, MessagesOutOfOrderEndTheSession) {
  // Output before hello, setup and go.
  send_output(0, base_bytes("early"));
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
  to_running(guest::kMaxStreamBytes);
  std::vector<std::uint8_t> chunk(guest::kMaxStreamBytes, 'z');
  for (int i = 0; i < 64; ++i) {
    send_output(0, chunk);
    ASSERT_FALSE(recorder_.closed) << i << ": " << recorder_.closed_reason;
    recorder_.output.clear();                                             // the owner writes it out...
    session_->grant_output(0, static_cast<std::uint32_t>(chunk.size()));  // ...and gives the credit back
    host_frames();
  }
  EXPECT_LE(session_->output_credit_left(0), guest::kMaxStreamBytes);
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
  session_->send_resize(0, 50, 132);
  auto frames = host_frames();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kResize));
  auto w = guest::decode_resize(frames.back().second);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->session, 0u);
  EXPECT_EQ(w->window.rows, 50);
  EXPECT_EQ(w->window.cols, 132);
}

// ---- command sessions ----

TEST_F(ControlSessionTest, AnExecsMessagesAreItsOwn) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(1, 300)));
  auto frames = host_frames();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().first, static_cast<std::uint8_t>(HostMessage::kExec));
  auto e = guest::decode_exec(frames.back().second);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->session, 1u);
  EXPECT_EQ(e->output_credit, 300u);
  send_message(GuestMessage::kStarted, guest::Started{0, 10});
  send_message(GuestMessage::kStarted, guest::Started{1, 11});
  send_message(GuestMessage::kStdinCredit, guest::SessionCredit{1, 500});
  send_output(1, base_bytes("exec out"));
  send_output(0, base_bytes("main out"));
  send_output(1, base_bytes("exec err"), /*is_stderr=*/true);
  send_message(GuestMessage::kExited, guest::Exited{1, true, 9});
  EXPECT_EQ(recorder_.calls.size() >= 7, true);
  std::vector<std::string> tail(recorder_.calls.end() - 7, recorder_.calls.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"started 10", "started 11 @1", "stdin_credit 500 @1", "stdout @1",
                                            "stdout", "stderr @1", "exited 9 @1"}));
  // Each credit is its own session's.
  EXPECT_EQ(session_->stdin_credit(1), 0u) << "the exec ended: its session is gone";
  EXPECT_EQ(session_->output_credit_left(0), 1024u - 8);
  EXPECT_FALSE(session_->session_open(1));
  EXPECT_TRUE(session_->session_open(0));
  EXPECT_FALSE(recorder_.closed);
  EXPECT_FALSE(recorder_.exited) << "the main command runs on";
  // Sends for the ended exec go nowhere (a grant racing its end).
  host_frames();
  session_->grant_output(1, 100);
  session_->send_stdin(1, base_bytes("late"));
  session_->send_signal(1, 9);
  EXPECT_TRUE(host_frames().empty());
}

TEST_F(ControlSessionTest, AnExecsOutputIsBoundByItsOwnCredit) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(1, 50)));
  send_message(GuestMessage::kStarted, guest::Started{1, 11});
  std::vector<std::uint8_t> chunk(40, 'e');
  send_output(0, std::vector<std::uint8_t>(500, 'm'));  // the main command's credit is its own
  send_output(1, chunk);
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  send_output(1, chunk);  // 80 > 50
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("40 bytes of output with 10 bytes of credit (session 1)"),
            std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, FramesForASessionThatIsNotOpenAreDroppedCountedAndReported) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(1)));
  send_message(GuestMessage::kStarted, guest::Started{0, 10});
  send_message(GuestMessage::kStarted, guest::Started{1, 11});
  // A hostile guest names sessions the host never opened: every kind of message.
  send_output(7, base_bytes("never opened"));
  send_output(7, base_bytes("never opened"), /*is_stderr=*/true);
  send_message(GuestMessage::kStarted, guest::Started{8, 1});
  send_message(GuestMessage::kStartFailed, guest::StartFailed{9, guest::StartFailure::kOther, 1, "x"});
  send_message(GuestMessage::kExited, guest::Exited{0xFFFFFFFF, false, 0});
  send_message(GuestMessage::kStdinCredit, guest::SessionCredit{12, 1 << 30});
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  EXPECT_EQ(session_->unknown_session_frames(), 6u);
  ASSERT_EQ(recorder_.unknown.size(), 6u);
  EXPECT_EQ(recorder_.unknown[0], (std::pair<std::string, std::uint32_t>{"stdout", 7}));
  EXPECT_EQ(recorder_.unknown[3], (std::pair<std::string, std::uint32_t>{"start_failed", 9}));
  EXPECT_EQ(recorder_.unknown[4], (std::pair<std::string, std::uint32_t>{"exited", 0xFFFFFFFFu}));
  EXPECT_EQ(recorder_.output, "") << "nothing of a session that is not open reached the owner";
  EXPECT_EQ(session_->stdin_credit(12), 0u);
  // The open sessions go on, their credit untouched.
  send_output(0, base_bytes("main"));
  send_output(1, base_bytes("exec"));
  send_message(GuestMessage::kExited, guest::Exited{1, false, 0});
  EXPECT_EQ(recorder_.output, "mainexec");
  EXPECT_EQ(recorder_.calls.back(), "exited 0 @1");
  // Once ended, an exec's id is one that is not open: its late frames are dropped too.
  send_output(1, base_bytes("late"));
  EXPECT_EQ(session_->unknown_session_frames(), 7u);
  EXPECT_FALSE(recorder_.closed);
}

TEST_F(ControlSessionTest, AFloodOfFramesForUnknownSessionsKeepsTheHostFlat) {
  to_running(1024);
  std::vector<std::uint8_t> chunk(guest::kMaxStreamBytes, 'f');
  for (std::uint32_t i = 0; i < 2000; ++i) send_output(1000 + i, chunk);
  EXPECT_FALSE(recorder_.closed) << recorder_.closed_reason;
  EXPECT_EQ(session_->unknown_session_frames(), 2000u);
  EXPECT_TRUE(recorder_.output.empty());
  send_output(0, base_bytes("still here"));
  EXPECT_EQ(recorder_.output, "still here");
}

TEST_F(ControlSessionTest, AnExecStartsOnceAndEndsOnce) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(1)));
  send_message(GuestMessage::kExited, guest::Exited{1, false, 0});  // before started
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("exited out of order"), std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, AnExecStartedTwiceEndsTheChannel) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(1)));
  send_message(GuestMessage::kStarted, guest::Started{1, 5});
  send_message(GuestMessage::kStarted, guest::Started{1, 5});
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("started out of order"), std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, ARefusedExecEndsItsSession) {
  to_running(1024);
  ASSERT_TRUE(session_->open_exec(exec(3)));
  send_message(GuestMessage::kStartFailed, guest::StartFailed{3, guest::StartFailure::kRefused, 11, "full"});
  EXPECT_EQ(recorder_.calls.back(), "start_failed full @3");
  EXPECT_FALSE(session_->session_open(3));
  EXPECT_FALSE(recorder_.closed);
}

TEST_F(ControlSessionTest, ExecIdsAreNeverZeroNorUsedTwice) {
  to_running(1024);
  EXPECT_FALSE(session_->open_exec(exec(0)));
  EXPECT_TRUE(session_->open_exec(exec(2)));
  EXPECT_FALSE(session_->open_exec(exec(2)));
  EXPECT_FALSE(session_->open_exec(exec(1))) << "lower than one used: ids only grow";
  EXPECT_TRUE(session_->open_exec(exec(3)));
  // One that does not fit a frame is refused before anything is sent.
  auto big = exec(4);
  big.argv.assign(2, std::string(40000, 'a'));
  host_frames();
  EXPECT_FALSE(session_->open_exec(big));
  EXPECT_TRUE(host_frames().empty());
}

TEST_F(ControlSessionTest, AnySessionsMessageBeforeSetupIsOutOfOrder) {
  send_message(GuestMessage::kHello, guest::Hello{guest::kProtocolVersion, "box-guest test", 1, true, "up"});
  send_output(5, base_bytes("before any session"));
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("stdout out of order"), std::string::npos)
      << recorder_.closed_reason;
  EXPECT_TRUE(recorder_.unknown.empty());
}

TEST_F(ControlSessionTest, MainSessionMessagesBeforeGoAreOutOfOrderEvenWithAnIdOfZero) {
  to_running_without_go(1024);
  send_message(GuestMessage::kStarted, guest::Started{0, 1});
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("started out of order"), std::string::npos)
      << recorder_.closed_reason;
}

TEST_F(ControlSessionTest, ASessionMessageTooShortForItsIdIsMalformed) {
  to_running(1024);
  send(GuestMessage::kStdout, base_bytes("abc"));
  EXPECT_TRUE(recorder_.closed);
  EXPECT_NE(recorder_.closed_reason.find("malformed stdout"), std::string::npos) << recorder_.closed_reason;
}

}  // namespace
}  // namespace abox::engine
