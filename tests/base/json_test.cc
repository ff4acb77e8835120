#include "base/json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace abox::base {
namespace {

using namespace std::string_literals;

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

// --- An independent strict RFC 8259 validator, used to check that whatever
// --- bytes go in, what comes out parses.

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7),
// decoded by value rather than by byte ranges; nullopt when ill-formed.
std::optional<std::size_t> utf8_length(std::string_view s, std::size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  std::uint32_t min = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1Fu, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0Fu, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07u, min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (s.size() - i < n) return std::nullopt;
  for (std::size_t k = 1; k < n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return n;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    auto n = utf8_length(s, i);
    if (!n) return false;
    i += *n;
  }
  return true;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

class JsonValidator {
 public:
  explicit JsonValidator(std::string_view s) : s_(s) {}

  bool document() {
    if (!valid_utf8(s_)) return false;
    return value() && pos_ == s_.size();
  }

 private:
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool value() {
    if (pos_ >= s_.size()) return false;
    switch (s_[pos_]) {
      case '{':
        return object();
      case '[':
        return array();
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }
  bool object() {
    ++pos_;
    if (eat('}')) return true;
    do {
      if (!string() || !eat(':') || !value()) return false;
    } while (eat(','));
    return eat('}');
  }
  bool array() {
    ++pos_;
    if (eat(']')) return true;
    do {
      if (!value()) return false;
    } while (eat(','));
    return eat(']');
  }
  bool string() {
    if (!eat('"')) return false;
    while (pos_ < s_.size()) {
      auto c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (pos_ >= s_.size()) return false;
      char e = s_[pos_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k) {
          if (pos_ >= s_.size() || !is_hex(s_[pos_++])) return false;
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return false;
      }
    }
    return false;
  }
  bool digits() {
    std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool number() {
    eat('-');
    if (eat('0')) return true;  // no leading zeros; the writer emits integers only
    if (pos_ >= s_.size() || s_[pos_] < '1' || s_[pos_] > '9') return false;
    return digits();
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

bool parses(std::string_view s) {
  return JsonValidator(s).document();
}

// Undoes the writer's escaping, turning \u00XX back into the byte XX: every
// input byte must survive the trip (the log loses nothing the guest sent).
std::string unescape_bytes(std::string_view quoted) {
  std::string out;
  for (std::size_t i = 1; i + 1 < quoted.size(); ++i) {
    if (quoted[i] != '\\') {
      out += quoted[i];
      continue;
    }
    char e = quoted[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        std::string hex(quoted.substr(i + 1, 4));
        out += static_cast<char>(std::stoi(hex, nullptr, 16));
        i += 4;
        break;
      }
      default:
        out += e;
    }
  }
  return out;
}

// The expected escaping, from the independent UTF-8 decoder above.
std::string reference_json_string(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    auto n = utf8_length(s, i);
    if (c >= 0x80 && n) {
      out += s.substr(i, *n);
      i += *n;
      continue;
    }
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

std::string show_bytes(std::string_view s) {
  std::string shown;
  for (unsigned char c : s) shown += std::to_string(c) + " ";
  return shown;
}

void expect_safe(std::string_view in) {
  std::string out = json_string(in);
  ASSERT_TRUE(parses(out)) << "bytes: " << show_bytes(in) << " -> " << out;
  ASSERT_EQ(out, reference_json_string(in)) << "bytes: " << show_bytes(in);
  ASSERT_EQ(unescape_bytes(out), in) << "bytes: " << show_bytes(in);
}

// --- append_json_string

TEST(JsonStringTest, PlainAndEmpty) {
  EXPECT_EQ(json_string(""), R"("")");
  EXPECT_EQ(json_string("example.com"), R"("example.com")");
  EXPECT_EQ(json_string("a/b ~"), R"("a/b ~")");  // '/' need not be escaped
}

TEST(JsonStringTest, AppendsToExistingText) {
  std::string out = "x=";
  append_json_string(out, "y");
  EXPECT_EQ(out, R"(x="y")");
}

TEST(JsonStringTest, QuotesAndBackslash) {
  EXPECT_EQ(json_string(R"(say "hi")"), R"("say \"hi\"")");
  EXPECT_EQ(json_string(R"(C:\path\)"), R"("C:\\path\\")");
  EXPECT_EQ(json_string(R"(\")"), R"("\\\"")");
  EXPECT_EQ(json_string("\\u0041"), R"("\\u0041")");  // not turned into an escape
}

TEST(JsonStringTest, ControlCharacters) {
  EXPECT_EQ(json_string("\n\r\t"), R"("\n\r\t")");
  EXPECT_EQ(json_string("a\0b"s), R"("a\u0000b")");
  EXPECT_EQ(json_string("\x01\x08\x0c\x1f"), R"("\u0001\u0008\u000c\u001f")");
  EXPECT_EQ(json_string("\x1b[31m"), R"("\u001b[31m")");  // terminal escapes neutralised
  EXPECT_EQ(json_string(" "), R"(" ")");
  for (int c = 0; c < 0x20; ++c) expect_safe(std::string(1, static_cast<char>(c)));
}

TEST(JsonStringTest, DeleteIsEscaped) {
  EXPECT_EQ(json_string("\x7f"), R"("\u007f")");
  EXPECT_EQ(json_string("~\x7f~"), R"("~\u007f~")");
}

TEST(JsonStringTest, ValidMultibytePassesThrough) {
  EXPECT_EQ(json_string("\xc2\x80"), "\"\xc2\x80\"");                  // U+0080, smallest 2-byte
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");            // é
  EXPECT_EQ(json_string("\xdf\xbf"), "\"\xdf\xbf\"");                  // U+07FF
  EXPECT_EQ(json_string("\xe0\xa0\x80"), "\"\xe0\xa0\x80\"");          // U+0800, smallest 3-byte
  EXPECT_EQ(json_string("\xe2\x82\xac"), "\"\xe2\x82\xac\"");          // €
  EXPECT_EQ(json_string("\xed\x9f\xbf"), "\"\xed\x9f\xbf\"");          // U+D7FF, below surrogates
  EXPECT_EQ(json_string("\xee\x80\x80"), "\"\xee\x80\x80\"");          // U+E000, above surrogates
  EXPECT_EQ(json_string("\xef\xbf\xbf"), "\"\xef\xbf\xbf\"");          // U+FFFF
  EXPECT_EQ(json_string("\xf0\x90\x80\x80"), "\"\xf0\x90\x80\x80\"");  // U+10000
  EXPECT_EQ(json_string("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");  // 😀
  EXPECT_EQ(json_string("\xf4\x8f\xbf\xbf"), "\"\xf4\x8f\xbf\xbf\"");  // U+10FFFF, the last
  EXPECT_EQ(json_string("\xe4\xb8\xad\"\xe6\x96\x87"), "\"\xe4\xb8\xad\\\"\xe6\x96\x87\"");
}

TEST(JsonStringTest, InvalidUtf8IsEscapedBytewise) {
  // Lone continuation bytes.
  EXPECT_EQ(json_string("\x80"), R"("\u0080")");
  EXPECT_EQ(json_string("\xbf"), R"("\u00bf")");
  EXPECT_EQ(json_string("a\x80\x80z"), R"("a\u0080\u0080z")");
  // Overlong 2-byte (C0/C1 can never start a valid sequence).
  EXPECT_EQ(json_string("\xc0\x80"), R"("\u00c0\u0080")");
  EXPECT_EQ(json_string("\xc0\xaf"), R"("\u00c0\u00af")");  // overlong '/'
  EXPECT_EQ(json_string("\xc1\xbf"), R"("\u00c1\u00bf")");
  // Overlong 3- and 4-byte.
  EXPECT_EQ(json_string("\xe0\x80\xaf"), R"("\u00e0\u0080\u00af")");
  EXPECT_EQ(json_string("\xe0\x9f\xbf"), R"("\u00e0\u009f\u00bf")");
  EXPECT_EQ(json_string("\xf0\x80\x80\x80"), R"("\u00f0\u0080\u0080\u0080")");
  EXPECT_EQ(json_string("\xf0\x8f\xbf\xbf"), R"("\u00f0\u008f\u00bf\u00bf")");
  // UTF-16 surrogates encoded as UTF-8 (CESU).
  EXPECT_EQ(json_string("\xed\xa0\x80"), R"("\u00ed\u00a0\u0080")");
  EXPECT_EQ(json_string("\xed\xbf\xbf"), R"("\u00ed\u00bf\u00bf")");
  // Past U+10FFFF, and lead bytes that never occur.
  EXPECT_EQ(json_string("\xf4\x90\x80\x80"), R"("\u00f4\u0090\u0080\u0080")");
  EXPECT_EQ(json_string("\xf5\x80\x80\x80"), R"("\u00f5\u0080\u0080\u0080")");
  EXPECT_EQ(json_string("\xf8\x88\x80\x80\x80"), R"("\u00f8\u0088\u0080\u0080\u0080")");
  EXPECT_EQ(json_string("\xfe\xff"), R"("\u00fe\u00ff")");
  // A bad continuation: the lead is escaped, the ASCII after it kept.
  EXPECT_EQ(json_string("\xc3("), R"("\u00c3(")");
  EXPECT_EQ(json_string("\xe2\x82("), R"("\u00e2\u0082(")");
  // A quote where a continuation should be is still escaped as a quote.
  EXPECT_EQ(json_string("\xc3\""), R"("\u00c3\"")");
}

TEST(JsonStringTest, TruncatedSequenceAtEnd) {
  EXPECT_EQ(json_string("\xc3"), R"("\u00c3")");
  EXPECT_EQ(json_string("ok\xe2"), R"("ok\u00e2")");
  EXPECT_EQ(json_string("ok\xe2\x82"), R"("ok\u00e2\u0082")");
  EXPECT_EQ(json_string("\xf0\x9f"), R"("\u00f0\u009f")");
  EXPECT_EQ(json_string("\xf0\x9f\x98"), R"("\u00f0\u009f\u0098")");
  // Truncated in the middle of a view of a longer buffer: no read past size().
  std::string_view whole = "\xf0\x9f\x98\x80";
  EXPECT_EQ(json_string(whole.substr(0, 3)), R"("\u00f0\u009f\u0098")");
  EXPECT_EQ(json_string(whole.substr(0, 2)), R"("\u00f0\u009f")");
  EXPECT_EQ(json_string(whole.substr(0, 1)), R"("\u00f0")");
  // A valid sequence right after a truncated one is kept.
  EXPECT_EQ(json_string("\xe2\x82\xc3\xa9"), "\"\\u00e2\\u0082\xc3\xa9\"");
}

TEST(JsonStringTest, EveryOneAndTwoByteStringIsSafe) {
  for (int a = 0; a < 256; ++a) {
    expect_safe(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) {
      std::string s = {static_cast<char>(a), static_cast<char>(b)};
      expect_safe(s);
      if (HasFatalFailure()) return;
    }
  }
}

// The bytes where UTF-8 validity changes: ASCII specials, continuation range
// edges, and leads at the overlong, surrogate and U+10FFFF boundaries.
constexpr unsigned char kEdgeBytes[] = {0x00, 0x22, 0x41, 0x5C, 0x7F, 0x80, 0x81, 0x8F,
                                        0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                                        0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};

// Every multibyte lead followed by every pair of edge bytes.
TEST(JsonStringTest, EveryLeadWithEdgeContinuationsIsSafe) {
  for (int lead = 0x80; lead < 0x100; ++lead) {
    for (unsigned char b : kEdgeBytes) {
      for (unsigned char c : kEdgeBytes) {
        std::string s = {static_cast<char>(lead), static_cast<char>(b), static_cast<char>(c)};
        expect_safe(s);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Four-byte forms (and their neighbours) with every triple of edge bytes.
TEST(JsonStringTest, FourByteLeadsWithEdgeContinuationsAreSafe) {
  for (int lead = 0xEF; lead <= 0xF5; ++lead) {
    for (unsigned char b : kEdgeBytes) {
      for (unsigned char c : kEdgeBytes) {
        for (unsigned char d : kEdgeBytes) {
          std::string s = {static_cast<char>(lead), static_cast<char>(b), static_cast<char>(c),
                           static_cast<char>(d)};
          expect_safe(s);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(JsonStringTest, RandomBytesAreSafe) {
  std::mt19937 rng(20261129);  // fixed seed: deterministic
  std::uniform_int_distribution<int> len(0, 12);
  // Mostly high bytes and continuation bytes, where the edge cases are.
  const std::string alphabet =
      "\x00\x1f\"\\a\x7f\x80\x8f\x90\x9f\xa0\xbf\xc0\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5\xff"s;
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  for (int round = 0; round < 20000; ++round) {
    std::string s;
    for (int n = len(rng); n > 0; --n) s += alphabet[pick(rng)];
    expect_safe(s);
    if (HasFatalFailure()) return;
  }
}

// --- JsonWriter

TEST(JsonWriterTest, EmptyContainers) {
  std::string out;
  JsonWriter(out).begin_object().end_object();
  EXPECT_EQ(out, "{}");
  out.clear();
  JsonWriter(out).begin_array().end_array();
  EXPECT_EQ(out, "[]");
}

TEST(JsonWriterTest, ObjectFields) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().field("a", 1).field("b", "two").field("c", true).key("d").null().end_object();
  EXPECT_EQ(out, R"({"a":1,"b":"two","c":true,"d":null})");
  EXPECT_TRUE(parses(out));
}

TEST(JsonWriterTest, ArrayValues) {
  std::string out;
  JsonWriter w(out);
  w.begin_array().value(1).value(false).null().value("x").end_array();
  EXPECT_EQ(out, R"([1,false,null,"x"])");
}

TEST(JsonWriterTest, NestedCommaPlacement) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.key("a").begin_object().end_object();
  w.key("b").begin_array().end_array();
  w.key("c").begin_array();
  w.begin_object().field("x", 1).end_object();
  w.begin_object().end_object();
  w.begin_array().value(1).begin_array().end_array().value(2).end_array();
  w.value(3);
  w.end_array();
  w.key("d").begin_object().key("e").begin_object().field("f", "g").end_object().end_object();
  w.field("h", 0);
  w.end_object();
  EXPECT_EQ(out, R"({"a":{},"b":[],"c":[{"x":1},{},[1,[],2],3],"d":{"e":{"f":"g"}},"h":0})");
  EXPECT_TRUE(parses(out));
}

TEST(JsonWriterTest, ArraysOfArrays) {
  std::string out;
  JsonWriter w(out);
  w.begin_array().begin_array().end_array().begin_array().end_array().begin_array().value(1).end_array();
  w.end_array();
  EXPECT_EQ(out, "[[],[],[1]]");
}

TEST(JsonWriterTest, KeysAreEscaped) {
  std::string out;
  JsonWriter(out).begin_object().field("we\"ird\n", "v\x80").end_object();
  EXPECT_EQ(out, R"({"we\"ird\n":"v\u0080"})");
  EXPECT_TRUE(parses(out));
}

TEST(JsonWriterTest, IntegerLimits) {
  std::string out;
  JsonWriter w(out);
  w.begin_array();
  w.value(std::numeric_limits<std::int64_t>::min());
  w.value(std::numeric_limits<std::int64_t>::max());
  w.value(std::numeric_limits<std::uint64_t>::max());
  w.value(std::int64_t{0});
  w.value(std::uint64_t{0});
  w.value(-1);
  w.value(std::numeric_limits<int>::min());
  w.value(std::numeric_limits<unsigned>::max());
  w.end_array();
  EXPECT_EQ(out,
            "[-9223372036854775808,9223372036854775807,18446744073709551615,0,0,-1,-2147483648,"
            "4294967295]");
  EXPECT_TRUE(parses(out));
}

TEST(JsonWriterTest, OverloadsPickTheRightType) {
  std::string out;
  JsonWriter w(out);
  const char* c_string = "text";
  std::string owned = "owned";
  w.begin_array().value(c_string).value(owned).value(true).value(0u).end_array();
  // A C string is a string, never a bool; an unsigned is a number.
  EXPECT_EQ(out, R"(["text","owned",true,0])");
}

TEST(JsonWriterTest, AppendsAfterExistingText) {
  std::string out = "prefix ";
  JsonWriter(out).begin_object().field("k", "v").end_object();
  EXPECT_EQ(out, R"(prefix {"k":"v"})");
}

TEST(JsonWriterTest, TopLevelScalar) {
  std::string out;
  JsonWriter(out).value("only");
  EXPECT_EQ(out, R"("only")");
}

// The validator itself must reject what it should, or the checks above prove nothing.
TEST(JsonValidatorTest, RejectsBrokenJson) {
  EXPECT_TRUE(parses(R"({"a":[1,-2,"x\u00e9\n"],"b":null})"));
  EXPECT_FALSE(parses(R"({"a":1,})"));
  EXPECT_FALSE(parses(R"([1 2])"));
  EXPECT_FALSE(parses("\"\x01\""));
  EXPECT_FALSE(parses("\"\x80\""));
  EXPECT_FALSE(parses("\"\xed\xa0\x80\""));
  EXPECT_FALSE(parses("\"\xc0\x80\""));
  EXPECT_FALSE(parses(R"("\x")"));
  EXPECT_FALSE(parses(R"("\u00g0")"));
  EXPECT_FALSE(parses(R"("open)"));
  EXPECT_FALSE(parses("01"));
}

}  // namespace
}  // namespace abox::base
