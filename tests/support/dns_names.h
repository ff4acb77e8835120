// DNS test helper: a dotted name in wire form, for tests that build
// messages by hand. Test-only; the code under test has its own reader and
// writer (dns/name.h, dns/message_writer.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace abox::testing {

// "www.example.com" -> 3www7example3com0 (uncompressed, ending with the
// root label; "" is the root alone). Labels are not checked.
inline std::vector<std::uint8_t> wire_name(std::string_view text) {
  std::vector<std::uint8_t> out;
  while (!text.empty()) {
    auto dot = text.find('.');
    auto label = text.substr(0, dot);
    out.push_back(static_cast<std::uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    text = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  }
  out.push_back(0);
  return out;
}

}  // namespace abox::testing
