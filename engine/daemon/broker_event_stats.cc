#include "engine/daemon/broker_event_stats.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <string>

namespace abox::engine {

namespace json = boost::json;

boost::json::object broker_event_stats(std::istream& events) {
  json::object brokers;
  auto entry_of = [&brokers](json::string_view binding) -> json::object& {
    auto& entry = brokers[binding];
    if (!entry.is_object())
      entry = json::object{{"requests", 0},
                           {"statuses", json::object{}},
                           {"backoff", json::object{{"started", 0}, {"answered", 0}, {"active", false}}}};
    return entry.get_object();
  };
  auto bump = [](json::value& v) { v = (v.is_int64() ? v.get_int64() : 0) + 1; };
  std::string line;
  while (std::getline(events, line)) {
    if (line.size() > kMaxBrokerEventLine) continue;
    if (line.find("\"broker_request\"") == std::string::npos &&
        line.find("\"broker_backoff\"") == std::string::npos &&
        line.find("\"provider_backoff\"") == std::string::npos)
      continue;
    std::error_code ec;
    json::value e = json::parse(line, ec);
    if (ec || !e.is_object()) continue;
    const auto& eo = e.get_object();
    const auto* b = eo.if_contains("binding");
    const auto* kind = eo.if_contains("kind");
    if (b == nullptr || !b->is_string() || kind == nullptr || !kind->is_string()) continue;
    if (kind->get_string() == "broker_request") {
      auto& entry = entry_of(b->get_string());
      bump(entry["requests"]);
      if (const auto* st = eo.if_contains("status")) {
        std::string key = st->is_string() ? std::string(st->get_string()) : json::serialize(*st);
        bump(entry["statuses"].get_object()[key]);
      }
    } else if (kind->get_string() == "broker_backoff") {
      const auto* ev = eo.if_contains("event");
      if (ev == nullptr || !ev->is_string()) continue;
      auto& backoff = entry_of(b->get_string())["backoff"].get_object();
      if (ev->get_string() == "started") bump(backoff["started"]);
      backoff["active"] = ev->get_string() != "ended";
    } else if (kind->get_string() == "broker_refused") {
      const auto* reason = eo.if_contains("reason");
      if (reason != nullptr && reason->is_string() && reason->get_string() == "provider_backoff")
        bump(entry_of(b->get_string())["backoff"].get_object()["answered"]);
    }
  }
  return brokers;
}

}  // namespace abox::engine
