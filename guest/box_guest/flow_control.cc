#include "guest/box_guest/flow_control.h"

namespace abox::guest {

std::uint32_t StdinFlow::open() {
  outstanding_ = kStdinWindow;
  return kStdinWindow;
}

std::size_t StdinFlow::accept(std::span<const std::uint8_t> bytes) {
  const std::size_t take =
      bytes.size() <= outstanding_ ? bytes.size() : static_cast<std::size_t>(outstanding_);
  outstanding_ -= take;
  if (!discarding_) {
    // Compact before growing, so the buffer never holds more than the window.
    if (head_ > 0 && head_ == buffer_.size()) {
      buffer_.clear();
      head_ = 0;
    }
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return bytes.size() - take;
}

std::uint32_t StdinFlow::consumed(std::size_t n) {
  head_ += n <= buffered() ? n : buffered();
  if (head_ == buffer_.size()) {
    buffer_.clear();
    head_ = 0;
  } else if (head_ >= kStdinWindow / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  if (discarding_) return 0;
  const std::uint64_t in_flight = outstanding_ + buffered();
  if (in_flight > kStdinWindow / 2) return 0;
  const auto grant = static_cast<std::uint32_t>(kStdinWindow - in_flight);
  outstanding_ += grant;
  return grant;
}

void StdinFlow::discard() {
  discarding_ = true;
  buffer_.clear();
  head_ = 0;
}

}  // namespace abox::guest
