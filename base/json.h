// JsonWriter: appends compact JSON to a caller-owned string. Used for event
// lines and for the CLI's --json output.
//
// The writer tracks only whether a comma is due; the caller nests begin/end
// calls correctly (a mismatch is a programming error, not input-dependent).
// Strings are escaped per RFC 8259; bytes that are not valid UTF-8 are written
// as \u00XX of the byte so the output is always valid JSON, whatever the
// guest put in a name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace abox::base {

class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // Inside an object: the next value's key.
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(std::int64_t n);
  JsonWriter& value(std::uint64_t n);
  JsonWriter& value(int n) { return value(static_cast<std::int64_t>(n)); }
  JsonWriter& value(unsigned n) { return value(static_cast<std::uint64_t>(n)); }
  JsonWriter& value(bool b);
  JsonWriter& null();

  // key(k).value(v) in one call.
  template <class V>
  JsonWriter& field(std::string_view k, const V& v) {
    key(k);
    return value(v);
  }

 private:
  void separate();

  std::string& out_;
  // One flag per open container: true once it holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// Appends s to out as a quoted, escaped JSON string.
void append_json_string(std::string& out, std::string_view s);

}  // namespace abox::base
