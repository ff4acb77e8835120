// The broker part of `abox stats` (engine/daemon/broker_event_stats.h):
// requests, statuses and provider backoffs counted from the broker's own
// event lines, and every other line skipped.
#include "engine/daemon/broker_event_stats.h"

#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>
#include <sstream>
#include <string>

namespace abox::engine {
namespace {

std::string stats_of(const std::string& text) {
  std::istringstream in(text);
  return boost::json::serialize(broker_event_stats(in));
}

TEST(BrokerEventStats, RequestsStatusesAndABackoff) {
  const std::string events =
      R"({"time":"t","instance":"dev","kind":"broker_request","binding":"api.example.test","status":200})"
      "\n"
      R"({"time":"t","instance":"dev","kind":"broker_request","binding":"api.example.test","status":429})"
      "\n"
      R"({"time":"t","instance":"dev","kind":"broker_backoff","binding":"api.example.test","port":443,"event":"started","status":429,"retry_after":"17","seconds":17})"
      "\n"
      R"({"time":"t","instance":"dev","kind":"broker_refused","reason":"provider_backoff","status":429,"binding":"api.example.test","retry_after":16})"
      "\n"
      R"({"time":"t","instance":"dev","kind":"broker_refused","reason":"provider_backoff","status":429,"binding":"api.example.test","retry_after":9})"
      "\n"
      R"({"time":"t","instance":"dev","kind":"broker_request","binding":"other.example.test","status":200})"
      "\n";
  EXPECT_EQ(stats_of(events), R"({"api.example.test":{"requests":2,"statuses":{"200":1,"429":1},)"
                              R"("backoff":{"started":1,"answered":2,"active":true}},)"
                              R"("other.example.test":{"requests":1,"statuses":{"200":1},)"
                              R"("backoff":{"started":0,"answered":0,"active":false}}})");
  const std::string ended =
      events +
      R"({"time":"t","instance":"dev","kind":"broker_backoff","binding":"api.example.test","port":443,"event":"ended","answered":2})"
      "\n";
  EXPECT_NE(stats_of(ended).find(R"("backoff":{"started":1,"answered":2,"active":false})"), std::string::npos)
      << stats_of(ended);
}

TEST(BrokerEventStats, WhatIsNotTheBrokersIsSkipped) {
  const std::string events =
      // Another refusal reason counts nothing; a guest-chosen binding in a
      // line of another kind (abox-net's, the agent's) neither.
      R"({"kind":"broker_refused","reason":"nonce_unknown","status":403,"binding":"api.example.test"})"
      "\n"
      R"({"kind":"deny","binding":"api.example.test","why":"\"broker_request\""})"
      "\n"
      R"({"kind":"broker_request","binding":7,"status":200})"
      "\n"  // binding not a string
      R"({"kind":"broker_request","status":200})"
      "\n"  // no binding
      R"({"kind":"broker_backoff","binding":"b","event":3})"
      "\n"  // event not a string
      R"(["broker_request"])"
      "\n"  // not an object
      R"({"kind":"broker_request","binding":"api.example.test")"
      "\n"  // cut short
      "{\"kind\":\"broker_request\",\"binding\":\"big\",\"pad\":\"" +
      std::string(kMaxBrokerEventLine, 'x') + "\"}\n";
  EXPECT_EQ(stats_of(events), "{}");
}

}  // namespace
}  // namespace abox::engine
