// MessageWriter (see message_writer.h). How a name is compressed: its labels
// are looked up from the root end, each by (offset of the suffix after it,
// folded label), until one is missing; the labels before that are written
// out and the rest becomes one pointer. Each label written out, when it
// lands below 0x4000, is then recorded under the suffix after it.
#include "dns/message_writer.h"

#include <array>

#include "dns/wire.h"

namespace abox::dns {

namespace {

constexpr std::size_t kMaxPointerTarget = 0x3FFF;
constexpr std::uint16_t kPointerBits = 0xC000;
constexpr std::uint16_t kRootSuffix = 0;  // no name starts at offset 0 (the header)
constexpr std::size_t kMaxLabels = kMaxWireName / 2;

std::string suffix_key(std::uint16_t rest, NameView name, std::size_t label_at) {
  const std::size_t length = name[label_at];
  std::string key;
  key.reserve(3 + length);
  key.push_back(static_cast<char>(rest >> 8));
  key.push_back(static_cast<char>(rest & 0xFF));
  for (std::size_t i = label_at; i <= label_at + length; ++i)
    key.push_back(static_cast<char>(fold_ascii(name[i])));
  return key;
}

}  // namespace

MessageWriter::MessageWriter(std::vector<std::uint8_t>& out) : out_(out) {
  out_.clear();
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
  // Where each label starts; the root label ends the list.
  std::array<std::size_t, kMaxLabels + 1> starts{};
  std::size_t labels = 0;
  for (std::size_t at = 0; at < wire.size() && wire[at] != 0 && labels < starts.size(); at += 1 + wire[at])
    starts[labels++] = at;

  // The longest suffix already written: labels [kept, labels) are found.
  std::size_t kept = labels;
  std::uint16_t rest = kRootSuffix;
  while (kept > 0) {
    auto it = suffixes_.find(suffix_key(rest, wire, starts[kept - 1]));
    if (it == suffixes_.end()) break;
    rest = it->second;
    --kept;
  }

  // Labels [0, kept) are written out; their offsets are recorded afterwards,
  // from the root end, since each key needs the offset of the suffix after it.
  std::array<std::size_t, kMaxLabels + 1> offsets{};
  for (std::size_t i = 0; i < kept; ++i) {
    offsets[i] = out_.size();
    const std::size_t length = wire[starts[i]];
    bytes(wire.subspan(starts[i], 1 + length));
  }
  if (kept == labels)
    u8(0);  // nothing of it was written before: ends with the root label
  else
    u16(static_cast<std::uint16_t>(kPointerBits | rest));
  if (overflowed_) return;
  for (std::size_t i = kept; i-- > 0;) {
    // Past 0x3FFF no pointer reaches it; lookups stop there, so the labels
    // before it are not recorded either.
    if (offsets[i] > kMaxPointerTarget) break;
    const auto offset = static_cast<std::uint16_t>(offsets[i]);
    suffixes_.emplace(suffix_key(rest, wire, starts[i]), offset);
    rest = offset;
  }
}

}  // namespace abox::dns
