#include "engine/cli/detach_keys.h"

namespace abox::engine {

DetachKeys::DetachKeys(std::vector<std::uint8_t> sequence) : sequence_(std::move(sequence)) {}

bool DetachKeys::feed(std::span<const std::uint8_t> typed, std::vector<std::uint8_t>& forward) {
  if (sequence_.empty()) {
    forward.insert(forward.end(), typed.begin(), typed.end());
    return false;
  }
  for (std::uint8_t b : typed) {
    if (b == sequence_[matched_]) {
      if (++matched_ == sequence_.size()) {
        matched_ = 0;
        return true;
      }
      continue;
    }
    // The sequence broke: what was held goes, then this byte is looked at
    // afresh (it may begin the sequence itself: Ctrl-P Ctrl-P Ctrl-Q detaches).
    forward.insert(forward.end(), sequence_.begin(),
                   sequence_.begin() + static_cast<std::ptrdiff_t>(matched_));
    matched_ = 0;
    if (b == sequence_[0]) {
      if (++matched_ == sequence_.size()) {
        matched_ = 0;
        return true;
      }
      continue;
    }
    forward.push_back(b);
  }
  return false;
}

std::optional<std::vector<std::uint8_t>> parse_detach_keys(std::string_view text) {
  std::vector<std::uint8_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    std::size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view key = text.substr(at, comma - at);
    if (key.size() == 6 && key.substr(0, 5) == "ctrl-") {
      char c = key[5];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c >= 'a' && c <= 'z') {
        out.push_back(static_cast<std::uint8_t>(c - 'a' + 1));
      } else if (c == '@') {
        out.push_back(0);
      } else if (c == '[' || c == '\\' || c == ']' || c == '^' || c == '_') {
        out.push_back(static_cast<std::uint8_t>(c - '@'));
      } else {
        return std::nullopt;
      }
    } else if (key.size() == 1 && key[0] > 0x20 && key[0] < 0x7f) {
      out.push_back(static_cast<std::uint8_t>(key[0]));
    } else {
      return std::nullopt;
    }
    at = comma + 1;
  }
  if (out.empty() || out.size() > 8) return std::nullopt;
  return out;
}

}  // namespace abox::engine
