// DetachKeys: the key sequence that leaves `abox attach` on a terminal with
// the instance running (Ctrl-P Ctrl-Q by default, as docker's), found in
// what the operator types, which otherwise goes to the command as it is.
//
// feed() takes each read from the terminal. Bytes that begin the sequence
// are held back until the next byte says whether the sequence goes on: when
// it does not, the held bytes go to the command in order, with the byte
// that broke it (so Ctrl-P alone still reaches the command, one keystroke
// late); when the whole sequence came, feed() says so and nothing of it,
// nor anything typed after it in the same read, is forwarded. A sequence
// split over several reads is found the same. What is held is at most the
// sequence's length less one.
//
// parse_detach_keys() reads docker's notation: comma-separated keys, each
// "ctrl-X" (X one of a-z, @, [, \, ], ^, _) or one printable character.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace abox::engine {

inline constexpr std::string_view kDefaultDetachKeys = "ctrl-p,ctrl-q";

class DetachKeys {
 public:
  explicit DetachKeys(std::vector<std::uint8_t> sequence);

  // Appends what goes to the command to `forward`; true once the whole
  // sequence was typed.
  bool feed(std::span<const std::uint8_t> typed, std::vector<std::uint8_t>& forward);
  // The held bytes (at the end of input they go to the command after all).
  std::span<const std::uint8_t> held() const { return {sequence_.data(), matched_}; }

 private:
  std::vector<std::uint8_t> sequence_;
  std::size_t matched_ = 0;
};

std::optional<std::vector<std::uint8_t>> parse_detach_keys(std::string_view text);

}  // namespace abox::engine
