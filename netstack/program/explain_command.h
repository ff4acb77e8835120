// `abox-net explain SOCKET TARGET`: asks a running `abox-net run`, over its
// --stats-socket, about TARGET now (like Cilium's `policy trace`): which
// names the DNS gate answered that address for and how long each answer has
// left, which rule or binding would take a flow, and whether a new flow
// would be admitted at this moment. The policy's own judgement
// (policy/explain.h) comes with it.
//
// The request is the line "explain [--json] [--udp] TARGET" (stats_server.h);
// the reply is one line with the exit status the client ends with (0
// admitted now, 1 refused now, 2 a bad target), then the answer as text or
// JSON, as asked.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "base/clock.h"

namespace abox::netstack {

class GuestStack;

// The client: `abox-net explain [options] SOCKET TARGET`.
int run_explain_command(std::span<const std::string_view> args);

// The server's side, inside `abox-net run`: the reply to "explain ARGS",
// from the stack's policy and answer table at `now`. Reads only.
std::string answer_explain(const GuestStack& stack, std::string_view args, base::MonoTime now);

}  // namespace abox::netstack
