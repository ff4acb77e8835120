// The helper's wire format (helper/wire.h, docs/helper.md): every request
// shape accepted, and every malformed or out-of-range one refused with the
// code and a message that says what is wrong.
#include "helper/wire.h"

#include <gtest/gtest.h>

#include <string>

#include "base/byte_reader.h"

namespace abox::helper {
namespace {

base::Result<Request, WireError> parse(std::string_view text, std::size_t fds = 0) {
  return parse_request(base::as_bytes(text), fds);
}

// Parses text and expects a refusal with code whose message holds `says`.
void expect_refused(std::string_view text, ErrorCode code, std::string_view says, std::size_t fds = 0) {
  auto r = parse(text, fds);
  ASSERT_FALSE(r.ok()) << quote(text);
  EXPECT_EQ(code_name(r.error().code), code_name(code)) << quote(text) << ": " << r.error().message;
  EXPECT_NE(r.error().message.find(says), std::string::npos) << quote(text) << ": " << r.error().message;
}

const std::string kCreate =
    "abox-helper/1 cgroup-create instance=dev memory_max=1073741824 "
    "cpu_max=200000/100000 pids_max=512\n";

TEST(HelperWire, EveryOperationParsesAndFormatsBackToTheSameBytes) {
  const std::pair<std::string, std::size_t> cases[] = {
      {"abox-helper/1 hello\n", 0},
      {kCreate, 0},
      {"abox-helper/1 cgroup-create instance=a memory_max=max cpu_max=max pids_max=max\n", 0},
      {"abox-helper/1 cgroup-move instance=dev pids=1,4194304,77\n", 0},
      {"abox-helper/1 cgroup-delete instance=run-1.x_y\n", 0},
      {"abox-helper/1 tap-create tap=abox0\n", 1},
      {"abox-helper/1 tap-delete tap=t_1.2-3\n", 1},
  };
  for (const auto& [text, fds] : cases) {
    auto r = parse(text, fds);
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().message;
    EXPECT_EQ(format_request(*r), text);
    EXPECT_EQ(fds_needed(*r), fds);
  }
}

TEST(HelperWire, CgroupCreateCarriesTheLimits) {
  auto r = parse(kCreate);
  ASSERT_TRUE(r.ok());
  const auto& c = std::get<CgroupCreateRequest>(*r);
  EXPECT_EQ(c.instance, "dev");
  EXPECT_EQ(c.limits.memory_max, 1073741824u);
  ASSERT_TRUE(c.limits.cpu_max.has_value());
  EXPECT_EQ(c.limits.cpu_max->quota_us, 200000u);
  EXPECT_EQ(c.limits.cpu_max->period_us, 100000u);
  EXPECT_EQ(c.limits.pids_max, 512u);
}

TEST(HelperWire, FramingIsStrict) {
  const std::string hello = "abox-helper/1 hello";
  expect_refused("", ErrorCode::kMalformed, "empty");
  expect_refused(hello, ErrorCode::kMalformed, "does not end with LF");
  expect_refused(hello + "\r\n", ErrorCode::kMalformed, "byte 19");
  expect_refused(hello + "\n\n", ErrorCode::kMalformed, "LF before the end");
  expect_refused(std::string("abox-helper/1 hel\0lo\n", 22), ErrorCode::kMalformed, "\\x00");
  expect_refused("abox-helper/1\thello\n", ErrorCode::kMalformed, "\\x09");
  expect_refused("abox-helper/1  hello\n", ErrorCode::kMalformed, "one space");
  expect_refused(" abox-helper/1 hello\n", ErrorCode::kMalformed, "one space");
  expect_refused(hello + " \n", ErrorCode::kMalformed, "one space");
  expect_refused("abox-helper/1 hello\xc3\xa9\n", ErrorCode::kMalformed, "\\xc3");
  expect_refused("abox-helper/1\n", ErrorCode::kMalformed, "no operation");
  std::string longest = "abox-helper/1 hello";
  longest.append(kMaxMessage - longest.size(), 'x');
  longest.back() = '\n';
  expect_refused(longest, ErrorCode::kUnknownOp, "no operation");  // 512 bytes: framing passes
  expect_refused(longest + "\n", ErrorCode::kMalformed, "longer than 512");
}

TEST(HelperWire, VersionAndOperation) {
  expect_refused("abox-helper/2 hello\n", ErrorCode::kVersion, "expected abox-helper/1");
  expect_refused("ABOX-HELPER/1 hello\n", ErrorCode::kVersion, "expected");
  expect_refused("hello\n", ErrorCode::kVersion, "'hello'");
  expect_refused("abox-helper/1 reboot\n", ErrorCode::kUnknownOp, "'reboot'");
  expect_refused("abox-helper/1 HELLO\n", ErrorCode::kUnknownOp, "'HELLO'");
  expect_refused("abox-helper/1 hello extra=1\n", ErrorCode::kBadField, "unexpected field 'extra'");
}

TEST(HelperWire, KeysInOrderEachExactlyOnce) {
  expect_refused("abox-helper/1 cgroup-create memory_max=max instance=a cpu_max=max pids_max=max\n",
                 ErrorCode::kBadField, "expected instance=");
  expect_refused("abox-helper/1 cgroup-create instance=a memory_max=max cpu_max=max\n", ErrorCode::kBadField,
                 "missing pids_max=");
  expect_refused(
      "abox-helper/1 cgroup-create instance=a memory_max=max cpu_max=max pids_max=max pids_max=max\n",
      ErrorCode::kBadField, "unexpected field 'pids_max'");
  expect_refused("abox-helper/1 cgroup-delete instance=a instance=b\n", ErrorCode::kBadField,
                 "unexpected field");
  expect_refused("abox-helper/1 cgroup-delete instance\n", ErrorCode::kBadField, "expected instance=");
  expect_refused("abox-helper/1 cgroup-delete Instance=a\n", ErrorCode::kBadField, "'Instance'");
  expect_refused("abox-helper/1 tap-create name=x\n", ErrorCode::kBadField, "expected tap=", 1);
}

TEST(HelperWire, NamesWithSlashDotsNulOrTooLongAreRefused) {
  const std::pair<std::string, std::string> bad[] = {
      {"a/b", "'/' is not allowed"},
      {"/etc", "'/' is not allowed"},
      {"..", "starts with '.'"},
      {".", "starts with '.'"},
      {"../x", "'/' is not allowed"},
      {".hidden", "starts with '.'"},
      {"-rf", "starts with '.' or '-'"},
      {"", "is empty"},
      {"a:b", "only A-Z"},
      {"a%2fb", "only A-Z"},
      {std::string(65, 'a'), "longer than 64"},
  };
  for (const auto& [name, says] : bad) {
    expect_refused("abox-helper/1 cgroup-delete instance=" + name + "\n", ErrorCode::kBadName, says);
  }
  EXPECT_TRUE(parse("abox-helper/1 cgroup-delete instance=" + std::string(64, 'a') + "\n").ok());
  // NUL inside a name is refused by the framing, before any name rule.
  expect_refused(std::string("abox-helper/1 cgroup-delete instance=a\0b\n", 40), ErrorCode::kMalformed,
                 "\\x00");

  expect_refused("abox-helper/1 tap-create tap=" + std::string(16, 't') + "\n", ErrorCode::kBadName,
                 "longer than 15", 1);
  EXPECT_TRUE(parse("abox-helper/1 tap-create tap=" + std::string(15, 't') + "\n", 1).ok());
  expect_refused("abox-helper/1 tap-create tap=..\n", ErrorCode::kBadName, "starts with '.'", 1);
  expect_refused("abox-helper/1 tap-delete tap=a/b\n", ErrorCode::kBadName, "'/'", 1);
}

TEST(HelperWire, NumbersAndRanges) {
  auto create = [](std::string mem, std::string cpu, std::string pids) {
    return "abox-helper/1 cgroup-create instance=a memory_max=" + mem + " cpu_max=" + cpu +
           " pids_max=" + pids + "\n";
  };
  expect_refused(create("1048575", "max", "max"), ErrorCode::kOutOfRange, "1048576 to 1099511627776");
  EXPECT_TRUE(parse(create("1048576", "max", "max")).ok());
  EXPECT_TRUE(parse(create("1099511627776", "max", "max")).ok());
  expect_refused(create("1099511627777", "max", "max"), ErrorCode::kOutOfRange, "memory_max");
  expect_refused(create("99999999999999999999", "max", "max"), ErrorCode::kOutOfRange, "too large");
  expect_refused(create("999999999999999999999", "max", "max"), ErrorCode::kBadField, "decimal number");
  expect_refused(create("01048576", "max", "max"), ErrorCode::kBadField, "leading zeros");
  expect_refused(create("-1", "max", "max"), ErrorCode::kBadField, "decimal");
  expect_refused(create("+1048576", "max", "max"), ErrorCode::kBadField, "decimal");
  expect_refused(create("1M", "max", "max"), ErrorCode::kBadField, "decimal");
  expect_refused(create("MAX", "max", "max"), ErrorCode::kBadField, "decimal");
  expect_refused(create("", "max", "max"), ErrorCode::kBadField, "decimal");

  expect_refused(create("max", "100000", "max"), ErrorCode::kBadField, "QUOTA/PERIOD");
  expect_refused(create("max", "100000 100000", "max"), ErrorCode::kBadField, "QUOTA/PERIOD");
  expect_refused(create("max", "999/100000", "max"), ErrorCode::kOutOfRange, "cpu_max quota");
  expect_refused(create("max", "1000/999", "max"), ErrorCode::kOutOfRange, "cpu_max period");
  expect_refused(create("max", "1000/1000001", "max"), ErrorCode::kOutOfRange, "cpu_max period");
  EXPECT_TRUE(parse(create("max", "1024000/1000", "max")).ok());
  expect_refused(create("max", "1024001/1000", "max"), ErrorCode::kOutOfRange, "cpu_max quota");
  expect_refused(create("max", "1000/1000/1000", "max"), ErrorCode::kBadField, "decimal");
  expect_refused(create("max", "max/100000", "max"), ErrorCode::kBadField, "decimal");

  expect_refused(create("max", "max", "0"), ErrorCode::kOutOfRange, "pids_max");
  expect_refused(create("max", "max", "4194305"), ErrorCode::kOutOfRange, "pids_max");
  EXPECT_TRUE(parse(create("max", "max", "4194304")).ok());
}

TEST(HelperWire, PidLists) {
  auto move = [](std::string pids) { return "abox-helper/1 cgroup-move instance=a pids=" + pids + "\n"; };
  expect_refused(move(""), ErrorCode::kBadField, "decimal");
  expect_refused(move("0"), ErrorCode::kOutOfRange, "pid");
  expect_refused(move("4194305"), ErrorCode::kOutOfRange, "pid");
  expect_refused(move("1,,2"), ErrorCode::kBadField, "decimal");
  expect_refused(move("1,"), ErrorCode::kBadField, "decimal");
  expect_refused(move(",1"), ErrorCode::kBadField, "decimal");
  expect_refused(move("5,6,5"), ErrorCode::kBadField, "5 is given twice");
  expect_refused(move("-5"), ErrorCode::kBadField, "decimal");
  std::string many;
  for (int i = 1; i <= 64; ++i) many += (i > 1 ? "," : "") + std::to_string(i);
  auto ok = parse(move(many));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(std::get<CgroupMoveRequest>(*ok).pids.size(), 64u);
  expect_refused(move(many + ",65"), ErrorCode::kOutOfRange, "more than 64");
}

TEST(HelperWire, FdsMustMatchTheOperation) {
  expect_refused("abox-helper/1 tap-create tap=t\n", ErrorCode::kMalformed, "takes 1 fd", 0);
  expect_refused("abox-helper/1 tap-create tap=t\n", ErrorCode::kMalformed, "2 came with it", 2);
  expect_refused("abox-helper/1 hello\n", ErrorCode::kMalformed, "takes 0 fds", 1);
  expect_refused("abox-helper/1 cgroup-delete instance=a\n", ErrorCode::kMalformed, "1 came with it", 1);
}

TEST(HelperWire, RepliesRoundTripAndAreBounded) {
  Reply ok{true, ErrorCode::kSystem, "version=1 cgroups=available"};
  auto back = parse_reply(base::as_bytes(format_reply(ok)));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->ok);
  EXPECT_EQ(back->text, ok.text);

  Reply err{false, ErrorCode::kBusy, "the cgroup\n has\x01 processes"};
  const std::string text = format_reply(err);
  EXPECT_EQ(text, "abox-helper/1 error busy the cgroup? has? processes\n");
  back = parse_reply(base::as_bytes(text));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->ok);
  EXPECT_EQ(back->code, ErrorCode::kBusy);

  Reply huge{false, ErrorCode::kSystem, std::string(2000, 'x')};
  EXPECT_EQ(format_reply(huge).size(), kMaxMessage);
  EXPECT_TRUE(parse_reply(base::as_bytes(format_reply(huge))).ok());

  EXPECT_FALSE(parse_reply(base::as_bytes("abox-helper/1 error nosuchcode x\n")).ok());
  EXPECT_FALSE(parse_reply(base::as_bytes("abox-helper/2 ok\n")).ok());
  EXPECT_FALSE(parse_reply(base::as_bytes("abox-helper/1 okay\n")).ok());
  EXPECT_FALSE(parse_reply(base::as_bytes("abox-helper/1 ok")).ok());
  EXPECT_FALSE(parse_reply(base::as_bytes("")).ok());
}

TEST(HelperWire, EveryCodeHasAWireName) {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kSystem); ++i) {
    const auto code = static_cast<ErrorCode>(i);
    auto name = code_name(code);
    auto back = code_from_name(name);
    ASSERT_TRUE(back.has_value()) << i;
    EXPECT_EQ(*back, code) << name;
  }
}

TEST(HelperWire, QuoteShowsOnlyVisibleBytes) {
  EXPECT_EQ(quote("ab"), "'ab'");
  EXPECT_EQ(quote(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(quote("it's"), "'it\\x27s'");
  EXPECT_EQ(quote(std::string(70, 'z')), "'" + std::string(64, 'z') + "...'");
}

}  // namespace
}  // namespace abox::helper
