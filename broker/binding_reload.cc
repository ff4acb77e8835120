#include "broker/binding_reload.h"

#include <cstdlib>

namespace abox::broker {

namespace {

std::string label(const policy::BrokerBinding& b) {
  return b.name + ":" + std::to_string(b.port);
}

// The first field in which `next` differs from `started`, or "".
std::string_view differing_field(const policy::BrokerBinding& started, const policy::BrokerBinding& next) {
  if (started.credential != next.credential) return "credential";
  if (started.header != next.header) return "header";
  if (started.nonce_env != next.nonce_env) return "nonce_env";
  if (started.methods != next.methods) return "methods";
  if (started.path_prefixes != next.path_prefixes) return "paths";
  if (started.allow_upgrade != next.allow_upgrade) return "allow_upgrade";
  if (started.backoff != next.backoff) return "backoff";
  return "";
}

}  // namespace

base::Result<BindingReloadPlan, std::string> plan_binding_reload(const policy::Policy& started,
                                                                 const std::vector<bool>& active_now,
                                                                 const policy::Policy& next) {
  if (active_now.size() != started.brokers().size()) std::abort();  // broken invariant: the caller's table
  BindingReloadPlan plan;
  plan.active.assign(started.brokers().size(), false);
  std::string errors;
  for (const auto& b : next.brokers()) {
    const policy::BrokerBinding* same = started.broker_for(b.name, b.port);
    if (same == nullptr) {
      errors += b.where.to_string() + ": [[broker]] " + label(b) +
                " is not a binding this broker started with, so it holds no key for it: restart the "
                "instance to add it\n";
      continue;
    }
    if (auto field = differing_field(*same, b); !field.empty()) {
      errors += b.where.to_string() + ": [[broker]] " + label(b) + ": its " + std::string(field) +
                " differs from the binding the broker started with: restart the instance to change it\n";
      continue;
    }
    plan.active[same->index] = true;
  }
  if (!errors.empty()) {
    errors.pop_back();
    return base::Err{std::move(errors)};
  }
  for (std::size_t i = 0; i < plan.active.size(); ++i) {
    if (active_now[i] && !plan.active[i]) plan.removed.push_back(label(started.brokers()[i]));
    if (!active_now[i] && plan.active[i]) plan.restored.push_back(label(started.brokers()[i]));
  }
  return plan;
}

}  // namespace abox::broker
