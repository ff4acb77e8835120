// Fuzz target: engine/daemon/api_request. The daemon parses every line a
// client of its uid sends; whatever the bytes: no crash, no hang, and
//   - an accepted request has v 1, an id of at most 2^53, a valid name for
//     the ops that take one, at most kMaxRunArgs args and an absolute cwd for run;
//   - a refusal always says why.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/daemon/api_request.h"
#include "engine/instance/state_folder.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::engine;  // NOLINT(google-build-using-namespace): a test driver for this one
  auto r = parse_api_request(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!r.ok()) {
    check(!r.error().message.empty());
    return 0;
  }
  check(r->id <= (1ull << 53));
  switch (r->op) {
    case ApiOp::kPing:
    case ApiOp::kList:
      check(r->name.empty());
      break;
    case ApiOp::kRun:
      check(r->args.size() <= kMaxRunArgs);
      check(!r->cwd.empty() && r->cwd[0] == '/');
      break;
    case ApiOp::kExec:
      check(valid_instance_name(r->name));
      check(!r->args.empty() && r->args.size() <= kMaxRunArgs && !r->args[0].empty());
      check(r->env.size() <= kMaxExecEnvEntries);
      for (const auto& e : r->env) check(e.find('=') != std::string::npos && e[0] != '=');
      check(r->workdir.empty() || r->workdir[0] == '/');
      break;
    case ApiOp::kExecInput:
      check(r->name.empty() && r->data.size() <= kMaxInputBytes);
      break;
    case ApiOp::kExecResize:
      check(r->name.empty());
      break;
    case ApiOp::kExecSignal:
      check(r->name.empty() && r->signal >= 1 && r->signal <= 64);
      break;
    default:
      check(valid_instance_name(r->name));
  }
  return 0;
}
