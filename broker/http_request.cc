// Request head parser: the shared reader (base/http1_request_head.h) with the
// broker's rules, its fields kept in RequestHead's inline array. Nothing is
// copied: the method, target, header names and values are views into the
// caller's buffer.
#include "broker/http_request.h"

#include <algorithm>

#include "broker/body_decoder.h"

namespace abox::broker {

struct RequestHeadBuilder {
  static base::Result<HeadStatus, HttpError> parse(std::span<const std::uint8_t> received,
                                                   const HeadLimits& limits, RequestHead& head) {
    base::http1::RequestRules rules;
    rules.max_head_bytes = limits.max_head_bytes;
    rules.max_fields = std::min(limits.max_fields, kMaxHeaderFields);
    rules.http_1_0 = false;
    rules.trace = false;
    rules.target = base::http1::TargetRules::strict;
    base::http1::RequestHead read;
    // The field array is read only up to field_count_ (clearing its 4 KiB on
    // every call would be a third of the parse).
    auto r = base::http1::read_request_head(received, rules, read, head.fields_);
    head.method_ = read.method;
    head.target_ = read.target;
    head.path_ = read.path;
    head.host_ = read.host;
    head.field_count_ = read.field_count;
    head.framing_ = read.framing;
    head.content_length_ = read.content_length;
    head.wants_upgrade_ = read.wants_upgrade;
    head.head_bytes_ = read.head_bytes;
    return r;
  }
};

HeadLimits HeadLimits::from(const policy::Limits& limits) {
  HeadLimits out;
  out.max_head_bytes = limits.http_head_bytes;
  return out;
}

BodyLimits body_limits(const policy::Limits& limits) {
  BodyLimits out;
  out.max_body_bytes = limits.http_body_bytes;
  return out;
}

const HeaderField* RequestHead::find(std::string_view name) const {
  for (const auto& f : fields()) {
    if (iequals(f.name, name)) return &f;
  }
  return nullptr;
}

std::size_t RequestHead::count(std::string_view name) const {
  return static_cast<std::size_t>(std::count_if(fields().begin(), fields().end(),
                                                [&](const HeaderField& f) { return iequals(f.name, name); }));
}

base::Result<HeadStatus, HttpError> parse_request_head(std::span<const std::uint8_t> received,
                                                       const HeadLimits& limits, RequestHead& head) {
  return RequestHeadBuilder::parse(received, limits, head);
}

}  // namespace abox::broker
