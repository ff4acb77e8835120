// exec_wire: the lines of an exec on api.sock. Every accepted shape, and the
// nasty ones refused with a reason: wrong types, out of range, unknown or
// mixed fields, NULs, over the bounds; the shim's lines read back.
#include "engine/instance/exec_wire.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "engine/daemon/base64.h"

namespace abox::engine {
namespace {

ExecRequest ok(const std::string& json) {
  auto r = parse_exec_request(json);
  EXPECT_TRUE(r.ok()) << json << ": " << (r.ok() ? "" : r.error());
  return r.ok() ? *r : ExecRequest{};
}

std::string refused(const std::string& json) {
  auto r = parse_exec_request(json);
  EXPECT_FALSE(r.ok()) << json;
  return r.ok() ? "" : r.error();
}

TEST(ExecWire, ARequestWithEveryField) {
  auto r = ok(R"({"argv":["sh","-c","stty size"],"env":["A=1","TERM=xterm"],"workdir":"/tmp","uid":0,)"
              R"("gid":5,"tty":true,"stdin":true,"rows":40,"cols":120})");
  EXPECT_EQ(r.argv, (std::vector<std::string>{"sh", "-c", "stty size"}));
  ASSERT_EQ(r.env.size(), 2u);
  EXPECT_EQ(r.env[1].name, "TERM");
  EXPECT_EQ(r.env[1].value, "xterm");
  EXPECT_EQ(r.workdir, "/tmp");
  EXPECT_EQ(r.uid, 0u);
  EXPECT_EQ(r.gid, 5u);
  EXPECT_TRUE(r.tty);
  EXPECT_TRUE(r.stdin_open);
  EXPECT_EQ(r.window.rows, 40);
  EXPECT_EQ(r.window.cols, 120);
  // Only argv is needed; the rest defaults to the agent's.
  auto d = ok(R"({"argv":["true"]})");
  EXPECT_EQ(d.uid, 1000u);
  EXPECT_EQ(d.gid, 1000u);
  EXPECT_EQ(d.workdir, "");
  EXPECT_FALSE(d.tty);
  // The request and its JSON agree both ways.
  auto again = ok(exec_request_json(r));
  EXPECT_EQ(again.argv, r.argv);
  EXPECT_EQ(again.env.size(), 2u);
  EXPECT_EQ(again.uid, 0u);
  EXPECT_EQ(again.window.cols, 120);
}

TEST(ExecWire, NastyRequestsAreRefusedWithAReason) {
  EXPECT_NE(refused("").find("not JSON"), std::string::npos);
  refused("[]");
  refused(R"({"argv":["a"]} x)");
  refused(R"({"argv":["a"],})");
  refused(std::string("{\"argv\":[\"\xff\"]}"));  // not UTF-8
  EXPECT_NE(refused(R"({"env":["A=1"]})").find("argv"), std::string::npos);
  refused(R"({"argv":[]})");
  refused(R"({"argv":"sh"})");
  refused(R"({"argv":[1]})");
  refused(R"({"argv":[""]})");
  refused(R"({"argv":["a\u0000b"]})");
  refused(R"({"argv":[["nested"]]})");
  EXPECT_NE(refused(R"({"argv":["a"],"bogus":1})").find("unknown field"), std::string::npos);
  refused(R"({"argv":["a"],"env":"A=1"})");
  refused(R"({"argv":["a"],"env":["NOEQUALS"]})");
  refused(R"({"argv":["a"],"env":["=x"]})");
  refused(R"({"argv":["a"],"env":["A\u0000=1"]})");
  refused(R"({"argv":["a"],"env":[1]})");
  refused(R"({"argv":["a"],"workdir":"relative"})");
  refused(R"({"argv":["a"],"workdir":7})");
  refused(R"({"argv":["a"],"workdir":"/a\u0000b"})");
  refused(R"({"argv":["a"],"workdir":"/)" + std::string(4096, 'w') + R"("})");
  refused(R"({"argv":["a"],"uid":-1})");
  refused(R"({"argv":["a"],"uid":4294967296})");
  refused(R"({"argv":["a"],"uid":1.5})");
  refused(R"({"argv":["a"],"uid":"0"})");
  refused(R"({"argv":["a"],"rows":65536})");
  refused(R"({"argv":["a"],"tty":1})");
  refused(R"({"argv":["a"],"stdin":"yes"})");
  std::string many = R"({"argv":[)";
  for (int i = 0; i <= 1024; ++i) many += i ? ",\"a\"" : "\"a\"";
  refused(many + "]}");
  std::string envs = R"({"argv":["a"],"env":[)";
  for (int i = 0; i <= 256; ++i) envs += i ? ",\"A=1\"" : "\"A=1\"";
  refused(envs + "]}");
  EXPECT_NE(refused(std::string(kMaxExecLine + 1, ' ')).find("longer than"), std::string::npos);
}

TEST(ExecWire, InputLines) {
  auto in = parse_exec_input(R"({"stdin":"aGkK"})");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->kind, ExecInput::Kind::kStdin);
  EXPECT_EQ(std::string(in->data.begin(), in->data.end()), "hi\n");
  EXPECT_EQ(parse_exec_input(R"({"eof":true})")->kind, ExecInput::Kind::kEof);
  auto rs = parse_exec_input(R"({"rows":30,"cols":90})");
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(rs->kind, ExecInput::Kind::kResize);
  EXPECT_EQ(rs->window.rows, 30);
  EXPECT_EQ(rs->window.cols, 90);
  auto sig = parse_exec_input(R"({"signal":15})");
  ASSERT_TRUE(sig.ok());
  EXPECT_EQ(sig->signo, 15);
  // The encoders write what the parser reads.
  std::vector<std::uint8_t> bytes = {0, 1, 2, 0xff};
  auto line = exec_stdin_line(bytes);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(parse_exec_input(line.substr(0, line.size() - 1))->data, bytes);
  line = exec_resize_line(7, 8);
  EXPECT_EQ(parse_exec_input(line.substr(0, line.size() - 1))->window.cols, 8);
  line = exec_signal_line(2);
  EXPECT_EQ(parse_exec_input(line.substr(0, line.size() - 1))->signo, 2);
  line = exec_eof_line();
  EXPECT_EQ(parse_exec_input(line.substr(0, line.size() - 1))->kind, ExecInput::Kind::kEof);
}

TEST(ExecWire, NastyInputLinesAreRefused) {
  for (const char* bad :
       {"", "{}", "[]", R"({"stdin":"aGk"})", R"({"stdin":7})", R"({"stdin":"aGkK","eof":true})",
        R"({"eof":false})", R"({"eof":1})", R"({"rows":1})", R"({"cols":1})", R"({"rows":1,"cols":70000})",
        R"({"rows":-1,"cols":1})", R"({"rows":1,"cols":1,"signal":2})", R"({"signal":0})", R"({"signal":65})",
        R"({"signal":"TERM"})", R"({"what":1})"}) {
    EXPECT_FALSE(parse_exec_input(bad).ok()) << bad;
  }
  std::string big = R"({"stdin":")" + std::string((kMaxExecStdin + 3) / 3 * 4 + 4, 'A') + R"("})";
  auto r = parse_exec_input(big);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("more than"), std::string::npos) << r.error();
}

TEST(ExecWire, TheShimsLinesAreOneJsonObjectEach) {
  auto parse = [](const std::string& line) {
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1);
    return boost::json::parse(line).as_object();
  };
  EXPECT_EQ(parse(exec_accepted_line(3))["session"], 3);
  EXPECT_EQ(parse(exec_refused_line("no"))["error"], "no");
  EXPECT_EQ(parse(exec_started_line(42))["started"].as_object()["pid"], 42);
  std::vector<std::uint8_t> out = {'\n', 0, 0x80};
  auto o = parse(exec_output_line(true, out));
  EXPECT_EQ(*base64_decode(std::string_view(o["stderr"].as_string())), out);
  ExecEnd exit;
  exit.exit = guest::Exited{1, true, 15};
  auto e = parse(exec_end_line(exit));
  EXPECT_EQ(e["done"], true);
  EXPECT_EQ(e["exit"].as_object()["signalled"], true);
  EXPECT_EQ(e["exit"].as_object()["value"], 15);
  // What the guest said is shown as printable ASCII, whatever its bytes.
  ExecEnd failed;
  failed.start_failed = guest::StartFailed{1, guest::StartFailure::kNotFound, 2, "not found: \x1b[2J\xff"};
  auto f = parse(exec_end_line(failed));
  EXPECT_EQ(f["start_failed"].as_object()["reason"], "not_found");
  EXPECT_EQ(f["start_failed"].as_object()["detail"], "not found: ?[2J?");
  ExecEnd gone;
  gone.error = "the instance stopped before the command ended";
  EXPECT_EQ(parse(exec_end_line(gone))["error"], gone.error.c_str());
}

}  // namespace
}  // namespace abox::engine
