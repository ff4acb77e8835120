// Key scrubber. How this works: the held tail and the new bytes are appended
// to `out` (the caller's buffer, so nothing is copied twice), every key
// occurrence in that appended region is overwritten, and the region's
// longest tail that is a proper prefix of the key is moved back into held_.
//
// Cost per byte: one append, one std::string_view::find over the region
// (memchr for the key's first byte, then a compare), and a bounded look at
// the last key-1 bytes for a possible start of the key.
#include "broker/key_scrubber.h"

#include <algorithm>
#include <cstring>

namespace abox::broker {

void KeyScrubber::feed(std::string_view in, std::string& out) {
  if (key_.empty()) {
    out.append(in);
    return;
  }
  const std::size_t start = out.size();
  out.append(held_);
  held_.clear();
  out.append(in);
  char* region = out.data() + start;
  const std::size_t size = out.size() - start;
  const std::string_view view(region, size);
  for (std::size_t pos = view.find(key_); pos != std::string_view::npos;
       pos = view.find(key_, pos + key_.size())) {
    std::memset(region + pos, kMask, key_.size());
    ++scrubbed_;
  }
  // The longest tail of the region that is a proper prefix of the key: it
  // starts with the key's first byte within the last key-1 bytes, and the
  // first such start that matches is the longest.
  const std::size_t window = std::min(size, key_.size() - 1);
  for (std::size_t at = size - window; at < size; ++at) {
    at = view.find(key_.front(), at);
    if (at == std::string_view::npos) break;
    if (view.substr(at) == key_.substr(0, size - at)) {
      held_.assign(view.substr(at));
      out.resize(start + at);
      return;
    }
  }
}

void KeyScrubber::finish(std::string& out) {
  out.append(held_);
  held_.clear();
}

}  // namespace abox::broker
