// Fuzz target: engine/cli/policy_suggest. `abox policy suggest` reads an
// event log a guest's traffic shaped (names, and whatever else is in the
// file), so whatever the input: no crash, no hang, and every suggestion it
// returns is a valid policy (parse_policy() accepts it) whose rules admit
// only names that are canonical DNS names.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/cli/policy_suggest.h"
#include "policy/policy_file.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool group : {false, true}) {
    abox::engine::SuggestOptions options;
    options.group_wildcards = group;
    auto s = abox::engine::suggest_policy(text, options);
    if (!s.ok()) continue;
    auto p = abox::policy::parse_policy(s->text, "fuzz");
    check(p.ok());
    check(p->rules().size() == s->rules);
  }
  return 0;
}
