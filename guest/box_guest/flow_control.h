// Flow control on the control channel, box-guest's side
// (docs/control-protocol.md, "Flow control").
//
// OutputCredit: how many more stdout+stderr bytes the host has room for.
// Setup gives the first credit; output_credit frames add to it. Reading the
// command's pipes stops at zero, so a command that floods blocks in write().
// The sum saturates at kMaxOutputCredit: a host that grants without end
// cannot wrap it.
//
// StdinFlow: the host's stdin bytes on their way into the command's stdin
// pipe. box-guest grants kStdinWindow bytes at a time (stdin_credit) and
// holds at most that many: what the host may still send plus what is
// buffered never exceeds the window. After the pipe took some, more credit
// is granted once at least half the window is free, so credit frames stay
// few. Bytes beyond the credit are a host that broke the protocol: they are
// dropped and counted (accept() says how many).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace abox::guest {

inline constexpr std::uint64_t kMaxOutputCredit = std::uint64_t{1} << 40;
inline constexpr std::uint32_t kStdinWindow = 64 * 1024;

class OutputCredit {
 public:
  explicit OutputCredit(std::uint32_t initial) : available_(initial) {}
  std::uint64_t available() const { return available_; }
  // How much of `want` may be sent now.
  std::size_t allowance(std::size_t want) const {
    return available_ < want ? static_cast<std::size_t>(available_) : want;
  }
  void spend(std::size_t n) { available_ -= n <= available_ ? n : available_; }
  void grant(std::uint32_t n) {
    available_ += n;
    if (available_ > kMaxOutputCredit) available_ = kMaxOutputCredit;
  }

 private:
  std::uint64_t available_;
};

class StdinFlow {
 public:
  // The first grant (the whole window), when the command starts.
  std::uint32_t open();

  // The host's bytes: buffered up to the credit; returns how many were
  // dropped for being over it.
  std::size_t accept(std::span<const std::uint8_t> bytes);
  // What waits for the pipe.
  std::span<const std::uint8_t> pending() const { return {buffer_.data() + head_, buffer_.size() - head_}; }
  // The pipe took n bytes of pending(); returns the credit to grant now (0: none yet).
  std::uint32_t consumed(std::size_t n);
  // The command's stdin went away (EPIPE): drop what is buffered, grant no more.
  void discard();

  std::uint64_t outstanding() const { return outstanding_; }
  std::size_t buffered() const { return buffer_.size() - head_; }

 private:
  std::vector<std::uint8_t> buffer_;
  std::size_t head_ = 0;
  std::uint64_t outstanding_ = 0;  // granted, not yet received
  bool discarding_ = false;
};

}  // namespace abox::guest
