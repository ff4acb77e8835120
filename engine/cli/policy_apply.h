// `abox policy apply NAME FILE`: a new policy for an instance, in force at
// once if it runs, and its policy of record for every later start.
//
// The steps, each stopping at the first failure with nothing changed:
//   1. FILE is validated as a whole (problems as FILE:LINE:COLUMN; exit 1).
//   2. The instance's state folder (engine/instance/state_folder.h) must
//      exist: instances started with `abox run -d`, and foreground ones
//      while they run (their folder goes when they end, unless --keep).
//      One on its way up or down has a supervisor, the one writer of its
//      instance.json: apply waits (10 s at most) until it answers on
//      api.sock, else fails (exit 3) with nothing changed
//      (instance_record_writer.h).
//   3. If the instance runs (its abox-net answers on net.stats), the new
//      text goes to its broker first (broker.ctl, when the instance has
//      one: the broker may refuse, e.g. a binding it holds no key for;
//      broker/binding_reload.h), then to abox-net. Should abox-net refuse
//      after the broker took it, the broker gets the old text back.
//      An instance that has no broker and a FILE with [[broker]] bindings is
//      refused: the keys are handed over at start only.
//   4. The text becomes the folder's policy.toml (written atomically), the
//      copy every later start (`abox start`) reads, and instance.json's
//      "policy" names FILE: written by the supervisor when told on api.sock
//      while there is one, here only once the record says stopped or
//      failed. A supervisor that cannot be told is exit 3.
// The output says what changed: names allowed and no longer allowed,
// bindings added and removed, and what the reloads report (flows revoked,
// answers forgotten, bindings removed or restored). --json prints the same
// as one object.
//
// Exit codes (exit_codes.h): 0 applied (or recorded, for an instance that
// is not running), 1 refused (FILE invalid, or a part of the running
// instance refused it: nothing changed), 2 usage error, 3 the work could not
// be done (FILE unreadable, no such instance, a part does not answer).
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy.h"

namespace abox::engine {

// What differs between two valid policies, as a person reads it.
struct PolicyDiff {
  std::vector<std::string> names_added;  // [[allow]] name patterns ("*.x" or "x"), sorted
  std::vector<std::string> names_removed;
  std::vector<std::string> bindings_added;  // [[broker]] "name:port", sorted
  std::vector<std::string> bindings_removed;
};
PolicyDiff diff_policies(const policy::Policy& before, const policy::Policy& after);

int run_policy_apply(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace abox::engine
