// The broker's names for the shared HTTP/1 body decoder. BodyDecoder itself
// lives in base/http1_body.h (abox-net's request follower reads bodies with
// it too); what is the broker's own is how the policy sets its limits.
#pragma once

#include "base/http1_body.h"
#include "broker/http_request.h"
#include "policy/policy.h"

namespace abox::broker {

using base::http1::append_chunk;
using base::http1::append_last_chunk;
using base::http1::BodyDecoder;
using base::http1::BodyLimits;
using base::http1::BodyStep;
using base::http1::kMaxChunkExtensionBytes;

// A guest's request bodies: at most the policy's http_body_bytes, no trailer
// fields.
BodyLimits body_limits(const policy::Limits& limits);

}  // namespace abox::broker
