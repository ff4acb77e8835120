// MessageWriter: appends one DNS message to a vector, with name compression
// (RFC 1035 section 4.1.4) and a hard size bound.
//
// Invariants: the message never grows past 65535 bytes; a write that would
// is dropped and overflowed() stays true from then on (the caller refuses
// the message). Compression only points at names written earlier with
// compress = true, at offsets below 0x4000, and matches suffixes ASCII
// case-insensitively, as every DNS implementation compares names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "dns/name.h"

namespace abox::dns {

class MessageWriter {
 public:
  // Clears `out` and writes into it; `out` must outlive the writer.
  explicit MessageWriter(std::vector<std::uint8_t>& out);

  void u8(std::uint8_t v);
  void u16(std::uint16_t v);
  void u32(std::uint32_t v);
  void bytes(std::span<const std::uint8_t> b);
  // `wire` is an uncompressed, well-formed name (a WireName's view). With
  // compress, its longest suffix already written becomes a pointer, and its
  // own suffixes become targets for later names.
  void name(NameView wire, bool compress);
  // Overwrites two bytes already written (counts, RDLENGTH).
  void patch_u16(std::size_t at, std::uint16_t v);

  std::size_t size() const { return out_.size(); }
  bool overflowed() const { return overflowed_; }

 private:
  bool fits(std::size_t n);
  // Does the message hold, at `offset`, the name `suffix` (compared ASCII
  // case-insensitively)? A hash hit is checked with this, never trusted.
  bool holds_at(std::size_t offset, NameView suffix) const;

  std::vector<std::uint8_t>& out_;
  bool overflowed_ = false;
  // Every suffix written so far, by a hash of its folded wire form, and the
  // offset it starts at. The hashes of all suffixes of a name come from one
  // pass over it (root end first), and lookups go from the longest suffix,
  // so a name seen before costs one lookup and a new label before a known
  // name two. A hash collision only costs compression: after a few failed
  // checks the name is written out.
  std::unordered_map<std::uint64_t, std::uint16_t> suffixes_;
  // Whole names written before, by a hash of their folded wire form, and
  // where they start: the usual case (an owner named again) costs one hash
  // and one check. 16 bytes or so per name, whatever its length.
  std::unordered_map<std::uint64_t, std::uint16_t> names_;
};

}  // namespace abox::dns
