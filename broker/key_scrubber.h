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
// What it must be fed: the bytes as the guest's client will read them, not
// as they travel. The broker feeds it a response head whole and a body with
// its framing taken off (ResponseRelay, response_relay.h): a chunk-size line
// in the middle of the key would otherwise hide it from the scrubber and not
// from a client that decodes the chunks.
//
// Invariant: whatever the pieces, the output is the input with every
// occurrence a left-to-right search finds overwritten, and it holds no
// occurrence of the key, provided the key does not contain kMask (the
// credentials loader refuses such a key: overwriting could otherwise make a
// new occurrence out of mask bytes).
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
  static constexpr char kMask = '*';

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
  std::uint64_t scrubbed_ = 0;
};

}  // namespace abox::broker
