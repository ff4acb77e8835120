#include "broker/backoff_table.h"

#include <utility>

namespace abox::broker {

BackoffTable::BackoffTable(const policy::Policy& policy, Accounting& accounting, base::EventLog& events,
                           Scheduler schedule)
    : policy_(policy),
      accounting_(accounting),
      events_(events),
      schedule_(std::move(schedule)),
      entries_(policy.brokers().size()) {}

void BackoffTable::on_response(std::size_t index, int status, std::string_view retry_after,
                               base::MonoTime now, std::int64_t wall_now_unix) {
  if (index >= entries_.size()) return;
  const auto& binding = policy_.brokers()[index];
  if (!binding.backoff) return;
  Entry& e = entries_.at(index);
  auto seconds = e.backoff.on_response(status, retry_after, now, wall_now_unix);
  if (!seconds) return;
  const bool extended = e.active;
  if (!extended) e.answered = 0;
  e.active = true;
  BindingAccount& account = accounting_.binding(index);
  ++account.backoffs;
  account.backoff_active = true;
  events_.emit("broker_backoff", {{"binding", binding.name},
                                  {"port", static_cast<std::uint64_t>(binding.port)},
                                  {"event", std::string_view(extended ? "extended" : "started")},
                                  {"status", status},
                                  {"retry_after", retry_after},
                                  {"seconds", static_cast<std::uint64_t>(*seconds)}});
  if (schedule_) schedule_(now + base::Seconds(*seconds));
}

std::optional<std::uint32_t> BackoffTable::held_back(std::size_t index, base::MonoTime now) {
  if (index >= entries_.size()) return std::nullopt;
  if (!policy_.brokers()[index].backoff) return std::nullopt;
  Entry& e = entries_.at(index);
  auto left = e.backoff.seconds_left(now);
  if (!left) return std::nullopt;
  ++e.answered;
  ++accounting_.binding(index).backoff_answered;
  return left;
}

void BackoffTable::expire(base::MonoTime now) {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (!e.active || e.backoff.seconds_left(now)) continue;
    e.active = false;
    accounting_.binding(i).backoff_active = false;
    const auto& binding = policy_.brokers()[i];
    events_.emit("broker_backoff", {{"binding", binding.name},
                                    {"port", static_cast<std::uint64_t>(binding.port)},
                                    {"event", "ended"},
                                    {"answered", e.answered}});
  }
}

}  // namespace abox::broker
