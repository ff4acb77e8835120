// KeyScrubber: makes sure a key's exact bytes never reach the guest, even when
// a provider echoes request headers back (the reflection case in THREATS.md).
//
// The broker forwards responses; everything it sends back to the guest on a
// connection that carried a key passes through one scrubber. Each exact
// occurrence of the key is overwritten in place by '*' of the same length
// (so Content-Length and chunk sizes stay right), and counted. A key split
// across two reads is caught: the scrubber holds back only the shortest tail
// that could still be the start of the key (usually nothing, so an SSE event
// is never delayed by it) until the next bytes or finish().
//
// Only the exact bytes: an encoded key (base64, JSON-escaped) is not caught;
// docs/broker.md says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace abox::broker {

class KeyScrubber {
 public:
  // An empty key scrubs nothing.
  explicit KeyScrubber(std::string_view key = {}) : key_(key) {}
  void reset(std::string_view key) {
    key_ = key;
    held_.clear();
  }

  // Appends `in`, scrubbed, to `out` (minus a held tail).
  void feed(std::string_view in, std::string& out);
  // Appends the held tail (it cannot complete the key any more).
  void finish(std::string& out);

  std::uint64_t scrubbed() const { return scrubbed_; }
  std::size_t held() const { return held_.size(); }

 private:
  std::string_view key_;  // the key is owned by the credentials table
  std::string held_;
  std::string work_;
  std::uint64_t scrubbed_ = 0;
};

}  // namespace abox::broker
