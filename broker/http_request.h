// HTTP/1.1 request heads from the guest, parsed strictly. Sans-I/O.
//
// The broker accumulates what the guest sent on a TLS connection and calls
// parse_request_head() each time more arrives, until it is complete or
// refused. A refused head is answered 400 with to_string(error) as the
// reason and the connection is closed; the upstream sees nothing.
//
// The rules are the shared reader's (base/http1_request_head.h), at their
// strictest: HTTP/1.1 only, CONNECT and TRACE refused whatever the binding
// says, TargetRules::strict (origin-form pchar; no dot segment, "%2e", "%2f"
// or "%5c" in the path, so that a path prefix check means what it says).
// An Upgrade sets wants_upgrade(); the gate refuses it unless the binding
// allows it. The whole head is at most HeadLimits::max_head_bytes (the
// policy's http_head_bytes), with at most HeadLimits::max_fields header
// fields (never more than kMaxHeaderFields).
//
// Invariants (the shared reader's):
//   - Monotone: once a prefix decides (complete or an error), every longer
//     input decides the same. Checks are made in stream order as each line's
//     CRLF arrives; only need_more depends on where the input ends.
//   - On complete, every string_view in the RequestHead points into the
//     `received` buffer passed to the call: the caller keeps that buffer
//     unchanged while it uses the head. head_bytes() bytes were the head;
//     the body (or the next request) starts right after.
//   - No allocation, no exception. Each call reads the prefix again, up to
//     max_head_bytes: O(limit) time. Every read goes through base::ByteReader.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/http1_request_head.h"
#include "base/http1_syntax.h"
#include "base/result.h"
#include "policy/policy.h"

namespace abox::broker {

// The most header fields a RequestHead can hold (the array is inline).
inline constexpr std::size_t kMaxHeaderFields = 128;

struct HeadLimits {
  std::size_t max_head_bytes = 16384;
  std::size_t max_fields = 100;  // clamped to kMaxHeaderFields

  static HeadLimits from(const policy::Limits& limits);
};

// Why a request (head or body) is refused: the shared reader's reasons
// (base/http1_syntax.h). to_string() is the 400's reason header and the
// event's reason; describe() a sentence.
using HttpError = base::http1::Error;
using base::http1::describe;
using base::http1::to_string;

using base::http1::BodyFraming;
using base::http1::HeaderField;
using base::http1::iequals;

// A complete, validated request head. Filled only by parse_request_head().
class RequestHead {
 public:
  std::string_view method() const { return method_; }
  std::string_view target() const { return target_; }  // as sent: path plus "?query" if any
  std::string_view path() const { return path_; }      // the target up to "?"
  std::string_view host() const { return host_; }      // the one Host value, OWS trimmed (may carry ":port")
  std::span<const HeaderField> fields() const { return {fields_.data(), field_count_}; }
  BodyFraming framing() const { return framing_; }
  std::uint64_t content_length() const { return content_length_; }  // 0 unless framing is content_length
  bool wants_upgrade() const { return wants_upgrade_; }
  std::size_t head_bytes() const { return head_bytes_; }  // request line through the empty line

  // The first field named `name` (ASCII case-insensitive), or nullptr.
  const HeaderField* find(std::string_view name) const;
  std::size_t count(std::string_view name) const;

 private:
  friend struct RequestHeadBuilder;
  std::string_view method_, target_, path_, host_;
  std::array<HeaderField, kMaxHeaderFields> fields_{};
  std::size_t field_count_ = 0;
  BodyFraming framing_ = BodyFraming::none;
  std::uint64_t content_length_ = 0;
  bool wants_upgrade_ = false;
  std::size_t head_bytes_ = 0;
};

using base::http1::HeadStatus;

// Parses the head at the start of `received` (everything the guest sent on
// this request so far). complete: `head` is filled (views into `received`).
// need_more: call again with more bytes; `head` is unspecified. An error:
// refuse with 400 and close.
[[nodiscard]] base::Result<HeadStatus, HttpError> parse_request_head(std::span<const std::uint8_t> received,
                                                                     const HeadLimits& limits,
                                                                     RequestHead& head);

}  // namespace abox::broker
