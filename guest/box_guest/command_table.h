// CommandTable: box-guest's command sessions by id (docs/control-protocol.md,
// "Command sessions"): the main command (session 0) and the exec sessions
// beside it, at most kMaxExecSessions of those at once.
//
// The host picks every exec's id; the table refuses, with a reason for the
// host (start_failed, kRefused), an id of 0 (the main command's), an id that
// is open already, and an exec past the bound. An exec session stays in the
// table from its open until it has sent its end (exited or start_failed) and
// remove_ended() ran; the main one stays to the end of the boot (what it
// holds is closed once it ended), so its state is always there to ask. The
// host's frames for an id that is not in the table are the session's
// (session.h) to log and drop.
//
// Bounded: one main session and kMaxExecSessions others. The table itself
// starts nothing (CommandSession::start() does), so it is tested without
// processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "base/result.h"
#include "guest/box_guest/command_session.h"

namespace abox::guest {

inline constexpr std::size_t kMaxExecSessions = 16;

class CommandTable {
 public:
  // The main command's session (id 0); at most one, ever.
  base::Result<CommandSession*, std::string> open_main(CommandSpec spec, std::uint32_t output_credit,
                                                       ControlOutput& out);
  // An exec session. The error is what start_failed's detail says.
  base::Result<CommandSession*, std::string> open_exec(std::uint32_t id, CommandSpec spec,
                                                       std::uint32_t output_credit, ControlOutput& out);

  CommandSession* find(std::uint32_t id);
  const CommandSession* find(std::uint32_t id) const;
  CommandSession* main() { return find(kMainSession); }
  const CommandSession* main() const { return find(kMainSession); }
  // Exec sessions open now (the main one not counted).
  std::size_t exec_count() const;
  std::size_t size() const { return sessions_.size(); }

  // Drops every exec session that has ended (its end was sent).
  void remove_ended();

  // Each session, in id order. f may not open or remove sessions.
  template <class F>
  void for_each(F&& f) {
    for (auto& [id, s] : sessions_) f(*s);
  }

 private:
  std::map<std::uint32_t, std::unique_ptr<CommandSession>> sessions_;
  bool main_opened_ = false;
};

}  // namespace abox::guest
