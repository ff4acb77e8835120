#include "broker/key_scrubber.h"

#include <algorithm>

namespace abox::broker {

void KeyScrubber::feed(std::string_view in, std::string& out) {
  if (key_.empty()) {
    out.append(in);
    return;
  }
  work_.assign(held_);
  work_.append(in);
  held_.clear();
  for (std::size_t pos = work_.find(key_); pos != std::string::npos;
       pos = work_.find(key_, pos + key_.size())) {
    std::fill_n(work_.begin() + static_cast<std::ptrdiff_t>(pos), key_.size(), '*');
    ++scrubbed_;
  }
  // The longest tail of work_ that is a proper prefix of the key.
  std::size_t keep = std::min(work_.size(), key_.size() - 1);
  while (keep > 0 && std::string_view(work_).substr(work_.size() - keep) != key_.substr(0, keep)) --keep;
  out.append(work_, 0, work_.size() - keep);
  held_.assign(work_, work_.size() - keep, keep);
}

void KeyScrubber::finish(std::string& out) {
  out.append(held_);
  held_.clear();
}

}  // namespace abox::broker
