// suggest_policy(): `abox policy suggest`'s work, from an event log's text
// to a policy in the project's TOML that allows exactly what was observed.
//
// Read: the lines of `abox-net run`'s event log (JSON lines; from an audit
// run, docs/policy.md#mode, or any run). A flow is an `admit` or a flow's
// `would_deny` (kind would_deny with a proto) with a name and a dst
// "ADDRESS:PORT"; it counts for (name, port, protocol). (An audited flow's
// admit, whose reason starts "audit mode", repeats its would_deny: skipped.) A DNS `would_deny`
// (one with a type) names a name asked for. Everything else is skipped, and
// so is every line that is longer than kMaxEventLine, not a JSON object, or
// whose fields are missing, of the wrong type, or not valid (a name that is
// not a canonical DNS name, a port outside 1-65535, a proto other than tcp
// or udp): the log is read as untrusted text, and nothing of it reaches the
// output but validated names and numbers.
//
// A flow's `close` event (name, dst, proto, bytes_out, bytes_in: abox-net
// writes one as each flow ends) adds its bytes to what its admit counted.
//
// Written: one [[allow]] per name and protocol (ports together; UDP with
// protocols = ["udp"]), each with a comment saying how many flows it covers
// (how many of them would_deny), their bytes out and in (from the close
// events read; "of the N that closed" when some flows had none, e.g. still
// open when the log ends) and when it was first seen; with
// group_wildcards, names sharing a parent domain (two or more names, a
// parent that is not a top-level domain) under "*.PARENT". With `from`, its
// text comes first, unchanged, and only what it does not already allow (by
// a rule or a [[broker]] binding) is added. Comments list what cannot be
// written as a rule: flows no name was answered for (by address), names
// asked by DNS with no flow, flows the run refused as reserved.
//
// The output is checked with parse_policy() before it is returned: what
// suggest_policy() returns always passes `abox policy check`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace abox::engine {

inline constexpr std::size_t kMaxEventLine = 64 * 1024;

struct SuggestOptions {
  bool group_wildcards = false;
  // --from: the policy (validated) and its text, which the output starts with.
  const policy::Policy* from = nullptr;
  std::string_view from_text;
  std::string_view events_source;  // the log's name, in the header comment
};

struct Suggestion {
  std::string text;       // the policy
  std::size_t rules = 0;  // [[allow]] tables added
  std::size_t flows = 0;  // flows the added rules cover
  std::size_t lines_read = 0;
  std::size_t lines_skipped = 0;  // not a flow or DNS event, or not valid
};

// Err: nothing to allow (no flow observed that `from` does not allow, and no
// `from`), or (a bug) the output did not validate; the message says which.
base::Result<Suggestion, std::string> suggest_policy(std::string_view events, const SuggestOptions& options);

}  // namespace abox::engine
