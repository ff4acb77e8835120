// plan_binding_reload(): what a policy reload does to the broker's bindings
// (issue 22, "Live reload"). Sans-I/O: the service (service.cc) parses the
// new text, asks this, and applies the answer to the injection gate on the
// loop's thread.
//
// The broker holds the keys of the bindings it started with and no way to
// get others (they came once over an fd, and the sandbox opens nothing), so
// a reload can only choose which of those bindings are in force:
//   - a binding of the start policy missing from the new one is removed: its
//     requests are refused from then on (403, binding_removed); requests
//     already forwarded finish;
//   - one present again (removed by an earlier reload) is restored;
//   - a binding the broker did not start with, or one whose fields differ
//     from its start version (credential, header, nonce_env, methods, paths,
//     allow_upgrade, backoff), cannot be put in force without a restart: the
//     whole reload is refused, nothing changes, and the error names the
//     binding's file:line:column in the new text.
// Bindings are matched by (name, port), the pair the policy keeps unique.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace abox::broker {

struct BindingReloadPlan {
  // Per binding of the start policy (brokers() order): in force after it.
  std::vector<bool> active;
  std::vector<std::string> removed;   // "name:port", in force before, not after
  std::vector<std::string> restored;  // "name:port", not in force before, in force after
};

// started: the policy the broker started with; active_now: which of its
// bindings are in force (same size as started.brokers()); next: the new,
// validated policy. Err: "FILE:LINE:COLUMN: ..." for each binding that
// cannot be put in force, one per line.
base::Result<BindingReloadPlan, std::string> plan_binding_reload(const policy::Policy& started,
                                                                 const std::vector<bool>& active_now,
                                                                 const policy::Policy& next);

}  // namespace abox::broker
