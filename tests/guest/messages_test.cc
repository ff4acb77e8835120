// The control channel's messages: every message round-trips, and decode()
// refuses short, long, over-cap and out-of-range payloads.
#include "guest/protocol/messages.h"

#include <gtest/gtest.h>

namespace abox::guest {
namespace {

template <class M, class D>
void expect_every_truncation_and_extension_refused(const M& m, D decode) {
  std::vector<std::uint8_t> p;
  encode(m, p);
  ASSERT_TRUE(decode(p).has_value());
  for (std::size_t cut = 0; cut < p.size(); ++cut) {
    EXPECT_FALSE(decode(std::span(p).first(cut)).has_value()) << "cut at " << cut;
  }
  auto longer = p;
  longer.push_back(0);
  EXPECT_FALSE(decode(longer).has_value());
}

Setup sample_setup() {
  Setup s;
  s.key.fill(0x42);
  s.ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  s.env = {{"PATH", "/bin:/usr/bin"}, {"OPENAI_API_KEY", "abox-nonce-00ff"}};
  s.workdir = "/home/agent";
  s.uid = 1000;
  s.gid = 1000;
  s.argv = {"sh", "-c", "echo hi"};
  s.probes = {{ProbeKind::kDeniedName, "denied.example"}, {ProbeKind::kDirectAddress, "192.0.2.1:443"}};
  s.output_credit = 256 * 1024;
  s.stdin_open = true;
  s.tty = true;
  s.window = {50, 132};
  return s;
}

TEST(ControlMessages, SetupRoundTrips) {
  auto s = sample_setup();
  std::vector<std::uint8_t> p;
  encode(s, p);
  auto d = decode_setup(p);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key, s.key);
  EXPECT_EQ(d->ca_pem, s.ca_pem);
  ASSERT_EQ(d->env.size(), 2u);
  EXPECT_EQ(d->env[1].name, "OPENAI_API_KEY");
  EXPECT_EQ(d->env[1].value, "abox-nonce-00ff");
  EXPECT_EQ(d->workdir, "/home/agent");
  EXPECT_EQ(d->argv, s.argv);
  ASSERT_EQ(d->probes.size(), 2u);
  EXPECT_EQ(d->probes[1].kind, ProbeKind::kDirectAddress);
  EXPECT_EQ(d->output_credit, 256u * 1024);
  EXPECT_TRUE(d->stdin_open);
  EXPECT_TRUE(d->tty);
  EXPECT_EQ(d->window.rows, 50u);
  EXPECT_EQ(d->window.cols, 132u);
  expect_every_truncation_and_extension_refused(s, decode_setup);
  // tty is 0 or 1.
  p.back() = 0;
  ASSERT_TRUE(decode_setup(p));
  p[p.size() - 5] = 2;
  EXPECT_FALSE(decode_setup(p));
}

TEST(ControlMessages, SetupRefusesEnvAndArgvThatExecCannotTake) {
  auto s = sample_setup();
  s.env.push_back({"A=B", "x"});
  std::vector<std::uint8_t> p;
  encode(s, p);
  EXPECT_FALSE(decode_setup(p));

  s = sample_setup();
  s.env.push_back({"", "x"});
  p.clear();
  encode(s, p);
  EXPECT_FALSE(decode_setup(p));

  s = sample_setup();
  s.argv.push_back(std::string("a\0b", 3));
  p.clear();
  encode(s, p);
  EXPECT_FALSE(decode_setup(p));

  s = sample_setup();
  s.argv.clear();
  p.clear();
  encode(s, p);
  EXPECT_FALSE(decode_setup(p));
}

TEST(ControlMessages, GuestMessagesRoundTripAndRefuseEveryTruncation) {
  Hello h{kProtocolVersion, "box-guest 0.1.0", 1234, true, "10.0.2.15/24 via 10.0.2.2"};
  expect_every_truncation_and_extension_refused(h, decode_hello);
  auto hd = [&] {
    std::vector<std::uint8_t> p;
    encode(h, p);
    return decode_hello(p);
  }();
  ASSERT_TRUE(hd);
  EXPECT_EQ(hd->agent, "box-guest 0.1.0");
  EXPECT_EQ(hd->uptime_ms, 1234u);
  EXPECT_TRUE(hd->network_up);

  SelftestReport rep;
  rep.results.push_back({ProbeKind::kDeniedName, ProbeOutcome::kPassed, "pastebin.com", "REFUSED"});
  rep.results.push_back({ProbeKind::kForeignResolver, ProbeOutcome::kFailed, "9.9.9.9:53", "answered"});
  expect_every_truncation_and_extension_refused(rep, decode_selftest_report);

  expect_every_truncation_and_extension_refused(Started{3, 42}, decode_started);
  expect_every_truncation_and_extension_refused(StartFailed{3, StartFailure::kNotFound, 2, "nope"},
                                                decode_start_failed);
  expect_every_truncation_and_extension_refused(Exited{3, false, 7}, decode_exited);
  expect_every_truncation_and_extension_refused(LogLine{"dhcp: lease 10.0.2.15"}, decode_log);
  expect_every_truncation_and_extension_refused(Credit{65536}, decode_credit);
}

TEST(ControlMessages, OutOfRangeValuesAreRefused) {
  std::vector<std::uint8_t> p;
  encode(Exited{0, false, 256}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{0, true, 0}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{0, true, 65}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{0, true, 9}, p);
  EXPECT_TRUE(decode_exited(p));
  // A start failure's reason is 1-5.
  p.clear();
  encode(StartFailed{1, StartFailure::kRefused, 11, "full"}, p);
  EXPECT_TRUE(decode_start_failed(p));
  p[4] = 6;
  EXPECT_FALSE(decode_start_failed(p));
  p[4] = 0;
  EXPECT_FALSE(decode_start_failed(p));

  // A probe kind or outcome outside the enum.
  SelftestReport rep;
  rep.results.push_back({ProbeKind::kDeniedName, ProbeOutcome::kPassed, "a", "b"});
  p.clear();
  encode(rep, p);
  p[2] = 9;  // kind
  EXPECT_FALSE(decode_selftest_report(p));
  p[2] = 1;
  p[3] = 7;  // outcome
  EXPECT_FALSE(decode_selftest_report(p));
}

TEST(ControlMessages, CapsAreEnforced) {
  Hello h;
  h.agent = std::string(kMaxShortText + 1, 'a');
  std::vector<std::uint8_t> p;
  encode(h, p);
  EXPECT_FALSE(decode_hello(p));

  LogLine l{std::string(kMaxLogText + 1, 'x')};
  p.clear();
  encode(l, p);
  EXPECT_FALSE(decode_log(p));

  SelftestReport rep;
  rep.results.resize(kMaxProbes + 1);
  p.clear();
  encode(rep, p);
  EXPECT_FALSE(decode_selftest_report(p));

  // A string length far past the payload.
  p = {0, 1, 0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(decode_hello(p));
}

TEST(ControlMessages, EveryTypeHasAName) {
  for (std::uint8_t t = 1; t <= 12; ++t) EXPECT_NE(guest_message_name(t), "unknown") << int(t);
  for (std::uint8_t t = 1; t <= 14; ++t) EXPECT_NE(host_message_name(t), "unknown") << int(t);
  EXPECT_EQ(guest_message_name(0), "unknown");
  EXPECT_EQ(guest_message_name(13), "unknown");
  EXPECT_EQ(host_message_name(15), "unknown");
  EXPECT_EQ(host_message_name(14), "exec");
  EXPECT_EQ(start_failure_name(StartFailure::kRefused), "refused");
}

// ---- version 3: command sessions ----

Exec sample_exec() {
  Exec e;
  e.session = 7;
  e.env = {{"FOO", "bar"}, {"TERM", "xterm"}};
  e.workdir = "/tmp";
  e.uid = 0;
  e.gid = 0;
  e.argv = {"sh", "-c", "stty size"};
  e.output_credit = 256 * 1024;
  e.stdin_open = true;
  e.tty = true;
  e.window = {40, 100};
  return e;
}

TEST(ControlMessages, ExecRoundTripsAndRefusesEveryTruncation) {
  auto e = sample_exec();
  std::vector<std::uint8_t> p;
  encode(e, p);
  auto d = decode_exec(p);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->session, 7u);
  ASSERT_EQ(d->env.size(), 2u);
  EXPECT_EQ(d->env[1].value, "xterm");
  EXPECT_EQ(d->workdir, "/tmp");
  EXPECT_EQ(d->uid, 0u);
  EXPECT_EQ(d->argv, e.argv);
  EXPECT_EQ(d->output_credit, 256u * 1024);
  EXPECT_TRUE(d->stdin_open);
  EXPECT_TRUE(d->tty);
  EXPECT_EQ(d->window.rows, 40u);
  EXPECT_EQ(d->window.cols, 100u);
  expect_every_truncation_and_extension_refused(e, decode_exec);
}

TEST(ControlMessages, ExecRefusesSessionZeroAndWhatExecCannotTake) {
  auto refused = [](const Exec& e) {
    std::vector<std::uint8_t> p;
    encode(e, p);
    return !decode_exec(p).has_value();
  };
  auto e = sample_exec();
  e.session = kMainSession;  // the main command's: never an exec's
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.argv.clear();
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.argv.push_back(std::string("a\0b", 3));
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.env.push_back({"A=B", "x"});
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.env.push_back({"", "x"});
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.workdir = "relative";
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.workdir = std::string("/a\0b", 4);
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.workdir = "/" + std::string(kMaxWorkdir, 'w');
  EXPECT_TRUE(refused(e));
  e = sample_exec();
  e.workdir = "";  // the home
  EXPECT_FALSE(refused(e));
  e.env.assign(kMaxEnvEntries + 1, {"A", "1"});
  EXPECT_TRUE(refused(e));
  // stdin_open and tty are 0 or 1.
  std::vector<std::uint8_t> p;
  encode(sample_exec(), p);
  p[p.size() - 5] = 2;
  EXPECT_FALSE(decode_exec(p));
  p[p.size() - 5] = 1;
  p[p.size() - 6] = 2;
  EXPECT_FALSE(decode_exec(p));
  // A list count far past the payload.
  p = {0, 0, 0, 1, 0xff, 0xff};
  EXPECT_FALSE(decode_exec(p));
}

TEST(ControlMessages, SessionDataIsTheRestOfThePayloadAfterItsSession) {
  const std::vector<std::uint8_t> bytes = {'h', 'i', 0, 0xff};
  std::vector<std::uint8_t> p;
  encode(SessionData{9, bytes}, p);
  ASSERT_EQ(p.size(), 8u);
  auto d = decode_session_data(p);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->session, 9u);
  EXPECT_EQ(std::vector<std::uint8_t>(d->bytes.begin(), d->bytes.end()), bytes);
  // Empty data is a session id alone; anything shorter is no session.
  auto empty = decode_session_data(std::span(p).first(4));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->bytes.empty());
  for (std::size_t cut = 0; cut < 4; ++cut) EXPECT_FALSE(decode_session_data(std::span(p).first(cut)));
  // The biggest a frame carries.
  std::vector<std::uint8_t> big(kMaxStreamBytes, 'x');
  p.clear();
  encode(SessionData{1, big}, p);
  EXPECT_EQ(p.size(), kMaxPayload);
  EXPECT_EQ(decode_session_data(p)->bytes.size(), kMaxStreamBytes);
}

TEST(ControlMessages, SessionMessagesRoundTripAndRefuseEveryTruncation) {
  expect_every_truncation_and_extension_refused(SessionCredit{4, 65536}, decode_session_credit);
  expect_every_truncation_and_extension_refused(SessionRef{4}, decode_session_ref);
  expect_every_truncation_and_extension_refused(Resize{4, {24, 80}}, decode_resize);
  expect_every_truncation_and_extension_refused(Signal{4, 15}, decode_signal);
  std::vector<std::uint8_t> p;
  encode(Signal{4, 0}, p);  // a signal is 1-64
  EXPECT_FALSE(decode_signal(p));
  p.clear();
  encode(Signal{4, 65}, p);
  EXPECT_FALSE(decode_signal(p));
  p.clear();
  encode(Resize{0xFFFFFFFF, {1, 2}}, p);
  auto r = decode_resize(p);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->session, 0xFFFFFFFFu);
  EXPECT_EQ(r->window.cols, 2u);
}

TEST(ControlMessages, SetupStatesItsVersionFirst) {
  auto s = sample_setup();
  std::vector<std::uint8_t> p;
  encode(s, p);
  EXPECT_EQ(peek_setup_version(p), kProtocolVersion);
  EXPECT_EQ(decode_setup(p)->version, kProtocolVersion);
  // Another version's setup: its version is read whatever follows.
  std::vector<std::uint8_t> other = {0, 2, 1, 2, 3};
  EXPECT_EQ(peek_setup_version(other), 2u);
  EXPECT_FALSE(decode_setup(other));
  EXPECT_FALSE(peek_setup_version(std::span(other).first(1)));
}

TEST(ControlMessages, VersionTwoMessagesRoundTripAndRefuseEveryTruncation) {
  expect_every_truncation_and_extension_refused(CopyResult{true, "tar: Removing leading `/'"},
                                                decode_copy_result);
  expect_every_truncation_and_extension_refused(WindowSize{24, 80}, decode_window_size);
  expect_every_truncation_and_extension_refused(CopyPath{"/home/agent/in"}, decode_copy_path);
  std::vector<std::uint8_t> p;
  encode(CopyResult{false, "no such file"}, p);
  auto r = decode_copy_result(p);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->detail, "no such file");
  p[0] = 2;  // ok is 0 or 1
  EXPECT_FALSE(decode_copy_result(p));
  p.clear();
  encode(CopyResult{true, std::string(kMaxShortText + 1, 'd')}, p);
  EXPECT_FALSE(decode_copy_result(p));
}

TEST(ControlMessages, ACopyPathIsAbsoluteWithoutNulAndCapped) {
  auto decodes = [](const std::string& path) {
    std::vector<std::uint8_t> p;
    encode(CopyPath{path}, p);
    return decode_copy_path(p).has_value();
  };
  EXPECT_TRUE(decodes("/"));
  EXPECT_TRUE(decodes("/" + std::string(kMaxGuestPath - 1, 'a')));
  EXPECT_FALSE(decodes("/" + std::string(kMaxGuestPath, 'a')));
  EXPECT_FALSE(decodes(""));
  EXPECT_FALSE(decodes("home/agent"));
  EXPECT_FALSE(decodes(std::string("/home/a\0b", 10)));
}

}  // namespace
}  // namespace abox::guest
