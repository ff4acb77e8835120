// MessageWriter (see message_writer.h). How a name is compressed: a name
// written before becomes a pointer to where it starts. Otherwise the hash
// of each of its suffixes is computed from the root end (each label's hash
// folds in the hash of the suffix after it); the suffixes are then looked up
// from the longest, and the first one found (and checked against the bytes
// at its offset) becomes a pointer, the labels before it are written out.
// Each label written out, when it lands below 0x4000, is recorded with the
// hash of the suffix it starts.
#include "dns/message_writer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>

#include "dns/wire.h"

namespace abox::dns {

namespace {

constexpr std::size_t kMaxPointerTarget = 0x3FFF;
constexpr std::uint16_t kPointerBits = 0xC000;
constexpr std::uint8_t kPointerTag = 0xC0;
constexpr std::size_t kMaxLabels = kMaxWireName / 2;
// Failed checks of hash hits per name before it is written out whole: hits
// that do not check out are collisions, which someone may have made on
// purpose; each check reads up to 255 bytes.
constexpr int kMaxFailedChecks = 4;

// FNV-1a over the folded label (length byte included), seeded with the hash
// of the suffix after it, then a final mix so that the buckets spread.
std::uint64_t label_hash(std::uint64_t rest, NameView name, std::size_t label_at) {
  constexpr std::uint64_t kPrime = 0x100000001B3;
  std::uint64_t h = rest ^ 0xCBF29CE484222325;
  const std::size_t length = name[label_at];
  for (std::size_t i = label_at; i <= label_at + length; ++i) h = (h ^ fold_ascii(name[i])) * kPrime;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCD;
  h ^= h >> 33;
  return h;
}

}  // namespace

MessageWriter::MessageWriter(std::vector<std::uint8_t>& out) : out_(out) {
  out_.clear();
}

bool MessageWriter::holds_at(std::size_t offset, NameView suffix) const {
  // The usual case: the name was written out there, in the same case. Equal
  // bytes read as the same name, so one comparison settles it.
  if (offset <= out_.size() && suffix.size() <= out_.size() - offset &&
      std::equal(suffix.begin(), suffix.end(), out_.begin() + static_cast<std::ptrdiff_t>(offset)))
    return true;
  std::size_t at = offset;
  std::size_t i = 0;
  // Our own names only point backwards, but the walk is bounded regardless.
  for (std::size_t steps = 0; steps <= kMaxLabels + kMaxLabels; ++steps) {
    if (at >= out_.size() || i >= suffix.size()) return false;
    const std::uint8_t length = out_[at];
    if ((length & kPointerTag) == kPointerTag) {
      if (at + 1 >= out_.size()) return false;
      at = (std::size_t{length & 0x3Fu} << 8) | out_[at + 1];
      continue;
    }
    if (length != suffix[i]) return false;
    if (length == 0) return i + 1 == suffix.size();
    if (at + 1 + length > out_.size() || i + 1 + length > suffix.size()) return false;
    for (std::size_t k = 1; k <= length; ++k)
      if (fold_ascii(out_[at + k]) != fold_ascii(suffix[i + k])) return false;
    at += 1 + length;
    i += 1 + length;
  }
  return false;
}

bool MessageWriter::fits(std::size_t n) {
  if (overflowed_ || n > kMaxMessageSize - out_.size()) {
    overflowed_ = true;
    return false;
  }
  return true;
}

void MessageWriter::u8(std::uint8_t v) {
  if (fits(1)) out_.push_back(v);
}

void MessageWriter::u16(std::uint16_t v) {
  if (!fits(2)) return;
  out_.push_back(static_cast<std::uint8_t>(v >> 8));
  out_.push_back(static_cast<std::uint8_t>(v & 0xFF));
}

void MessageWriter::u32(std::uint32_t v) {
  if (!fits(4)) return;
  u16(static_cast<std::uint16_t>(v >> 16));
  u16(static_cast<std::uint16_t>(v & 0xFFFF));
}

void MessageWriter::bytes(std::span<const std::uint8_t> b) {
  if (fits(b.size())) out_.insert(out_.end(), b.begin(), b.end());
}

void MessageWriter::patch_u16(std::size_t at, std::uint16_t v) {
  if (at + 2 > out_.size()) return;  // only after an overflow dropped the field
  out_[at] = static_cast<std::uint8_t>(v >> 8);
  out_[at + 1] = static_cast<std::uint8_t>(v & 0xFF);
}

void MessageWriter::name(NameView wire, bool compress) {
  if (!compress) {
    bytes(wire);
    return;
  }
  std::array<char, kMaxWireName> folded{};
  const std::size_t size = std::min(wire.size(), folded.size());
  for (std::size_t i = 0; i < size; ++i) folded[i] = static_cast<char>(fold_ascii(wire[i]));
  const std::uint64_t whole = std::hash<std::string_view>{}(std::string_view(folded.data(), size));
  if (auto it = names_.find(whole); it != names_.end() && holds_at(it->second, wire)) {
    u16(static_cast<std::uint16_t>(kPointerBits | it->second));
    return;
  }
  // Where each label starts, and the hash of the suffix it starts.
  std::array<std::size_t, kMaxLabels + 1> starts{};
  std::array<std::uint64_t, kMaxLabels + 1> hashes{};
  std::size_t labels = 0;
  for (std::size_t at = 0; at < wire.size() && wire[at] != 0 && labels < starts.size(); at += 1 + wire[at])
    starts[labels++] = at;
  std::uint64_t rest = 0;  // the root's
  for (std::size_t i = labels; i-- > 0;) {
    hashes[i] = label_hash(rest, wire, starts[i]);
    rest = hashes[i];
  }

  // The longest suffix already written: labels [kept, labels) are found.
  std::size_t kept = labels;
  std::size_t target = 0;
  int failed = 0;
  for (std::size_t i = 0; i < labels && failed < kMaxFailedChecks; ++i) {
    auto it = suffixes_.find(hashes[i]);
    if (it == suffixes_.end()) continue;
    if (!holds_at(it->second, wire.subspan(starts[i]))) {
      ++failed;
      continue;
    }
    kept = i;
    target = it->second;
    break;
  }

  const std::size_t start = kept > 0 ? out_.size() : target;
  for (std::size_t i = 0; i < kept; ++i) {
    const std::size_t offset = out_.size();
    bytes(wire.subspan(starts[i], 1 + std::size_t{wire[starts[i]]}));
    if (!overflowed_ && offset <= kMaxPointerTarget)
      suffixes_.emplace(hashes[i], static_cast<std::uint16_t>(offset));
  }
  if (labels > 0 && !overflowed_ && start <= kMaxPointerTarget)
    names_.emplace(whole, static_cast<std::uint16_t>(start));
  if (kept == labels)
    u8(0);  // nothing of it was written before: ends with the root label
  else
    u16(static_cast<std::uint16_t>(kPointerBits | target));
}

}  // namespace abox::dns
