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

  expect_every_truncation_and_extension_refused(Started{42}, decode_started);
  expect_every_truncation_and_extension_refused(StartFailed{StartFailure::kNotFound, 2, "nope"},
                                                decode_start_failed);
  expect_every_truncation_and_extension_refused(Exited{false, 7}, decode_exited);
  expect_every_truncation_and_extension_refused(LogLine{"dhcp: lease 10.0.2.15"}, decode_log);
  expect_every_truncation_and_extension_refused(Credit{65536}, decode_credit);
}

TEST(ControlMessages, OutOfRangeValuesAreRefused) {
  std::vector<std::uint8_t> p;
  encode(Exited{false, 256}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{true, 0}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{true, 65}, p);
  EXPECT_FALSE(decode_exited(p));
  p.clear();
  encode(Exited{true, 9}, p);
  EXPECT_TRUE(decode_exited(p));

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
  for (std::uint8_t t = 1; t <= 13; ++t) EXPECT_NE(host_message_name(t), "unknown") << int(t);
  EXPECT_EQ(guest_message_name(0), "unknown");
  EXPECT_EQ(guest_message_name(13), "unknown");
  EXPECT_EQ(host_message_name(14), "unknown");
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
