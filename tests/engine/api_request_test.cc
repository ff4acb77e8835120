// The daemon's request parser (engine/daemon/api_request.h): every accepted
// shape, and the nasty ones refused with a reason and the id when readable.
#include "engine/daemon/api_request.h"

#include <gtest/gtest.h>

#include <string>

namespace abox::engine {
namespace {

ApiRequest ok(const std::string& line) {
  auto r = parse_api_request(line);
  EXPECT_TRUE(r.ok()) << line << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : ApiRequest{};
}

std::string refused(const std::string& line) {
  auto r = parse_api_request(line);
  EXPECT_FALSE(r.ok()) << line;
  return r.ok() ? "" : r.error().message;
}

TEST(ApiRequest, EveryOp) {
  EXPECT_EQ(ok(R"({"v":1,"id":1,"op":"ping"})").op, ApiOp::kPing);
  auto ls = ok(R"({"v":1,"id":2,"op":"ls","all":true})");
  EXPECT_EQ(ls.op, ApiOp::kList);
  EXPECT_TRUE(ls.all);
  EXPECT_EQ(ls.id, 2u);
  auto rm = ok(R"({"op":"rm","v":1,"id":3,"name":"dev-1","force":true})");
  EXPECT_EQ(rm.op, ApiOp::kRemove);
  EXPECT_EQ(rm.name, "dev-1");
  EXPECT_TRUE(rm.force);
  auto logs = ok(R"({"v":1,"id":4,"op":"logs","name":"a","follow":true})");
  EXPECT_EQ(logs.op, ApiOp::kLogs);
  EXPECT_TRUE(logs.follow);
  for (const char* op : {"inspect", "stop", "start", "stats", "events"})
    ok(std::string(R"({"v":1,"id":5,"op":")") + op + R"(","name":"x"})");
  auto run = ok(R"({"v":1,"id":6,"op":"run","args":["-p","/p.toml","--","sh","-c","echo é"],"cwd":"/tmp",)"
                R"("term":"xterm","lang":"C.UTF-8"})");
  EXPECT_EQ(run.op, ApiOp::kRun);
  ASSERT_EQ(run.args.size(), 6u);
  EXPECT_EQ(run.args[5], "echo é");
  EXPECT_EQ(run.cwd, "/tmp");
  EXPECT_EQ(run.term, "xterm");
}

TEST(ApiRequest, NotJsonOrNotAnObject) {
  refused("");
  refused("{");
  refused("[1,2]");
  refused("\"ping\"");
  refused(R"({"v":1,"id":1,"op":"ping"} trailing)");
  refused(R"({"v":1,"id":1,"op":"ping",})");
  refused(R"({"v":1,"id":1,"op":"ping"/*c*/})");
  refused(std::string("{\"v\":1,\"id\":1,\"op\":\"p\xff\"}"));  // not UTF-8
}

TEST(ApiRequest, VersionIdAndOp) {
  EXPECT_NE(refused(R"({"id":1,"op":"ping"})").find("\"v\""), std::string::npos);
  EXPECT_NE(refused(R"({"v":2,"id":1,"op":"ping"})").find("speaks 1"), std::string::npos);
  refused(R"({"v":"1","id":1,"op":"ping"})");
  refused(R"({"v":1.0,"id":1,"op":"ping"})");
  refused(R"({"v":1,"op":"ping"})");
  refused(R"({"v":1,"id":-1,"op":"ping"})");
  refused(R"({"v":1,"id":1.5,"op":"ping"})");
  refused(R"({"v":1,"id":"1","op":"ping"})");
  refused(R"({"v":1,"id":18446744073709551615,"op":"ping"})");
  ok(R"({"v":1,"id":9007199254740992,"op":"ping"})");
  refused(R"({"v":1,"id":9007199254740993,"op":"ping"})");
  refused(R"({"v":1,"id":1})");
  refused(R"({"v":1,"id":1,"op":7})");
  EXPECT_NE(refused(R"({"v":1,"id":1,"op":"reboot"})").find("unknown op"), std::string::npos);
}

TEST(ApiRequest, TheIdComesBackWithARefusal) {
  auto r = parse_api_request(R"({"v":1,"id":42,"op":"stop"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().id, 42u);
  auto twice = parse_api_request(R"({"v":1,"id":9,"op":"rm","name":"a","name":"b"})");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().id, 9u);
  auto bad = parse_api_request("not json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().id, 0u);
}

TEST(ApiRequest, FieldsOfAnotherOpOrUnknownAreRefused) {
  EXPECT_NE(refused(R"({"v":1,"id":1,"op":"ping","name":"x"})").find("takes no field"), std::string::npos);
  refused(R"({"v":1,"id":1,"op":"ls","force":true})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"x","follow":true})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"x","Name":"y"})");
  refused(R"({"v":1,"id":1,"op":"ls","all":1})");
  refused(R"({"v":1,"id":1,"op":"ls","all":"true"})");
  refused(R"({"v":1,"id":1,"op":"logs","name":"x","follow":null})");
}

TEST(ApiRequest, RepeatedKeysAreRefused) {
  EXPECT_NE(refused(R"({"v":1,"id":1,"op":"rm","name":"a","name":"b"})").find("twice"), std::string::npos);
  refused(R"({"v":1,"id":1,"op":"ping","op":"ping"})");
  refused(R"({"v":1,"id":1,"id":2,"op":"ping"})");
}

TEST(ApiRequest, NestingIsRefused) {
  refused(R"({"v":1,"id":1,"op":"ls","all":{"a":1}})");
  refused(R"({"v":1,"id":1,"op":"run","args":[["x"]],"cwd":"/"})");
  refused(std::string(2000, '[') + std::string(2000, ']'));
}

TEST(ApiRequest, Names) {
  refused(R"({"v":1,"id":1,"op":"stop"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":""})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"../etc"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"a/b"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":".hidden"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"-f"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":"a\u0000b"})");
  refused(R"({"v":1,"id":1,"op":"stop","name":7})");
  refused(R"({"v":1,"id":1,"op":"stop","name":")" + std::string(65, 'a') + R"("})");
  ok(R"({"v":1,"id":1,"op":"stop","name":")" + std::string(64, 'a') + R"("})");
}

TEST(ApiRequest, RunFields) {
  refused(R"({"v":1,"id":1,"op":"run","cwd":"/"})");
  refused(R"({"v":1,"id":1,"op":"run","args":"sh","cwd":"/"})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a",1],"cwd":"/"})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a\u0000"],"cwd":"/"})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a"]})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a"],"cwd":"relative"})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a"],"cwd":"/","term":1})");
  refused(R"({"v":1,"id":1,"op":"run","args":["a"],"cwd":"/","env":["A=1"]})");
  std::string many = R"({"v":1,"id":1,"op":"run","cwd":"/","args":[)";
  for (std::size_t i = 0; i <= kMaxRunArgs; ++i) many += (i ? ",\"a\"" : "\"a\"");
  refused(many + "]}");
}

TEST(ApiRequest, Input) {
  auto in = ok(R"({"v":1,"id":1,"op":"input","name":"a","data":"aGkK"})");
  EXPECT_EQ(in.op, ApiOp::kInput);
  EXPECT_EQ(std::string(in.data.begin(), in.data.end()), "hi\n");
  EXPECT_FALSE(in.eof);
  EXPECT_TRUE(ok(R"({"v":1,"id":1,"op":"input","name":"a","eof":true})").eof);
  refused(R"({"v":1,"id":1,"op":"input","name":"a","data":"aGk"})");      // not padded
  refused(R"({"v":1,"id":1,"op":"input","name":"a","data":"a G k K"})");  // not base64
  refused(R"({"v":1,"id":1,"op":"input","name":"a","data":7})");
  refused(R"({"v":1,"id":1,"op":"input","data":"aGkK"})");
  std::string big(((kMaxInputBytes + 3) / 3) * 4, 'A');
  refused(R"({"v":1,"id":1,"op":"input","name":"a","data":")" + big + R"("})");
  EXPECT_TRUE(ok(R"({"v":1,"id":1,"op":"logs","name":"a","follow":true,"from_end":true})").from_end);
  refused(R"({"v":1,"id":1,"op":"events","name":"a","from_end":true})");
}

TEST(ApiRequest, Exec) {
  auto e = ok(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["sh","-c","id"],"env":["A=1","B=x=y"],)"
              R"("workdir":"/tmp","user":"0:5","tty":true,"interactive":true,"rows":40,"cols":100})");
  EXPECT_EQ(e.op, ApiOp::kExec);
  EXPECT_EQ(e.name, "dev");
  EXPECT_EQ(e.args, (std::vector<std::string>{"sh", "-c", "id"}));
  EXPECT_EQ(e.env, (std::vector<std::string>{"A=1", "B=x=y"}));
  EXPECT_EQ(e.workdir, "/tmp");
  EXPECT_EQ(e.uid, 0u);
  EXPECT_EQ(e.gid, 5u);
  EXPECT_TRUE(e.tty);
  EXPECT_TRUE(e.interactive);
  EXPECT_EQ(e.rows, 40);
  EXPECT_EQ(e.cols, 100);
  auto plain = ok(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"]})");
  EXPECT_EQ(plain.uid, 1000u);
  EXPECT_EQ(plain.gid, 1000u);
  EXPECT_EQ(ok(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"user":"7"})").gid, 7u);
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev"})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":[]})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":[""]})");
  refused(R"({"v":1,"id":3,"op":"exec","args":["ls"]})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"env":["NOEQ"]})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"env":["=v"]})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"env":[7]})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"workdir":"rel"})");
  for (const char* user : {"root", "-1", "1:", ":1", "1:2:3", "4294967296", "12345678901", " 1"})
    refused(std::string(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"user":")") + user + "\"}");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"rows":65536})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"cols":-1})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"tty":"yes"})");
  refused(R"({"v":1,"id":3,"op":"exec","name":"dev","args":["ls"],"cwd":"/"})");  // run's field
  std::string many = R"({"v":1,"id":1,"op":"exec","name":"d","args":["a"],"env":[)";
  for (std::size_t i = 0; i <= kMaxExecEnvEntries; ++i) many += (i ? ",\"A=1\"" : "\"A=1\"");
  refused(many + "]}");
}

TEST(ApiRequest, ExecInputResizeSignalAndResize) {
  auto in = ok(R"({"v":1,"id":4,"op":"exec_input","exec":3,"data":"aGkK","eof":true})");
  EXPECT_EQ(in.op, ApiOp::kExecInput);
  EXPECT_EQ(in.exec, 3u);
  EXPECT_EQ(std::string(in.data.begin(), in.data.end()), "hi\n");
  EXPECT_TRUE(in.eof);
  refused(R"({"v":1,"id":4,"op":"exec_input","data":"aGkK"})");
  EXPECT_EQ(ok(R"({"v":1,"id":4,"op":"exec_input","exec":0})").exec, 0u);  // an id may be 0
  refused(R"({"v":1,"id":4,"op":"exec_input","exec":-1})");
  refused(R"({"v":1,"id":4,"op":"exec_input","exec":9007199254740993})");
  refused(R"({"v":1,"id":4,"op":"exec_input","exec":"3"})");
  refused(R"({"v":1,"id":4,"op":"exec_input","exec":3,"name":"dev"})");
  auto rs = ok(R"({"v":1,"id":5,"op":"exec_resize","exec":3,"rows":24,"cols":80})");
  EXPECT_EQ(rs.op, ApiOp::kExecResize);
  EXPECT_EQ(rs.rows, 24);
  refused(R"({"v":1,"id":5,"op":"exec_resize","exec":3,"rows":24})");
  auto sig = ok(R"({"v":1,"id":6,"op":"exec_signal","exec":3,"signal":2})");
  EXPECT_EQ(sig.signal, 2);
  refused(R"({"v":1,"id":6,"op":"exec_signal","exec":3})");
  refused(R"({"v":1,"id":6,"op":"exec_signal","exec":3,"signal":0})");
  refused(R"({"v":1,"id":6,"op":"exec_signal","exec":3,"signal":65})");
  auto r = ok(R"({"v":1,"id":7,"op":"resize","name":"dev","rows":50,"cols":132})");
  EXPECT_EQ(r.op, ApiOp::kResize);
  EXPECT_EQ(r.cols, 132);
  refused(R"({"v":1,"id":7,"op":"resize","rows":50,"cols":132})");
  refused(R"({"v":1,"id":7,"op":"resize","name":"dev","cols":132})");
  EXPECT_EQ(api_op_names().size(), 16u);
  EXPECT_EQ(api_op_names().back(), "resize");
}

TEST(ApiRequest, Bounded) {
  std::string big =
      R"({"v":1,"id":1,"op":"run","cwd":"/","args":[")" + std::string(kMaxRequestBytes, 'a') + R"("]})";
  EXPECT_NE(refused(big).find("longer than"), std::string::npos);
}

}  // namespace
}  // namespace abox::engine
