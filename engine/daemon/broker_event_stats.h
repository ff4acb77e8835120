// BrokerEventStats: the broker part of `abox stats` (the daemon's `stats` op,
// docs/api.md), counted from the broker's own lines in an instance's
// events.jsonl, never from anything the guest reports:
//
//   {binding: {"requests": N, "statuses": {status: N},
//              "backoff": {"started": N, "answered": N, "active": bool}}}
//
//   broker_request                        requests, statuses (forwarded upstream)
//   broker_backoff event=started          backoff.started; active until "ended"
//   broker_refused reason=provider_backoff backoff.answered (the broker's own 429)
//
// A line is read only when it is at most kMaxBrokerEventLine bytes, names one
// of those kinds and parses as a JSON object with a string binding; anything
// else is skipped. The entries are the bindings named by the broker, which
// names only its policy's.
#pragma once

#include <boost/json/object.hpp>
#include <cstddef>
#include <istream>

namespace abox::engine {

inline constexpr std::size_t kMaxBrokerEventLine = 64 * 1024;

boost::json::object broker_event_stats(std::istream& events);

}  // namespace abox::engine
