#include "guest/box_guest/command_table.h"

namespace abox::guest {

base::Result<CommandSession*, std::string> CommandTable::open_main(CommandSpec spec,
                                                                   std::uint32_t output_credit,
                                                                   ControlOutput& out) {
  if (main_opened_) return base::Err{std::string("the main command was started already")};
  main_opened_ = true;
  auto s = std::make_unique<CommandSession>(kMainSession, std::move(spec), output_credit, out);
  CommandSession* raw = s.get();
  sessions_[kMainSession] = std::move(s);
  return raw;
}

base::Result<CommandSession*, std::string> CommandTable::open_exec(std::uint32_t id, CommandSpec spec,
                                                                   std::uint32_t output_credit,
                                                                   ControlOutput& out) {
  if (id == kMainSession) return base::Err{std::string("session 0 is the main command's")};
  if (sessions_.count(id) != 0) return base::Err{"session " + std::to_string(id) + " is open already"};
  if (exec_count() >= kMaxExecSessions)
    return base::Err{"box-guest runs at most " + std::to_string(kMaxExecSessions) +
                     " exec sessions at once, and " + std::to_string(exec_count()) + " run"};
  auto s = std::make_unique<CommandSession>(id, std::move(spec), output_credit, out);
  CommandSession* raw = s.get();
  sessions_[id] = std::move(s);
  return raw;
}

CommandSession* CommandTable::find(std::uint32_t id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

const CommandSession* CommandTable::find(std::uint32_t id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

std::size_t CommandTable::exec_count() const {
  return sessions_.size() - sessions_.count(kMainSession);
}

void CommandTable::remove_ended() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->first != kMainSession && it->second->state() == CommandSession::State::kEnded)
      it = sessions_.erase(it);
    else
      ++it;
  }
}

}  // namespace abox::guest
