// Live policy reload for `abox-net run` (issue 22): the client
// `abox-net reload SOCKET FILE`, and the server's side, PolicyReloader,
// which takes a new policy's text (from the stats socket's "reload" request,
// or from the policy file on SIGHUP), validates it, and hands it to
// GuestStack::apply_policy(), which swaps it in on the loop's thread.
//
// Validation first: the text is parsed as a whole (policy_file.h); an
// invalid one changes nothing, and the reply (and a "policy" event) lists
// its problems as file:line:column. The client reads FILE itself and sends
// its text, so the sandboxed abox-net opens no path.
//
// The reply to "reload SOURCE" is one line with the exit status the client
// ends with (0 applied, 1 refused: nothing changed), then what happened as
// text.
//
// SIGHUP: the sandbox forbids opening files, so abox-net keeps the policy
// file it started with open and reads that file again (same inode: an
// editor that writes in place, `cat new > FILE`). A file replaced since
// (renamed over, deleted) is refused with a message saying to use
// `abox-net reload`; with --no-sandbox the path is opened again instead.
// `abox policy apply` replaces the file the same way (the state folder's
// policy.toml, renamed over), so it sends the fd of the new file with its
// reload request: once applied, that file is the one SIGHUP rereads (it is
// checked against the path like the first: the same inode, once the apply
// has renamed it into place).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "base/event_log.h"
#include "base/unique_fd.h"

namespace abox::netstack {

class GuestStack;

// The client: `abox-net reload SOCKET FILE`.
int run_reload_command(std::span<const std::string_view> args);

class PolicyReloader {
 public:
  // path: the policy file abox-net started with; file: it, opened before the
  // sandbox (may be invalid: SIGHUP then says it cannot read). reopen: open
  // the path again on each SIGHUP (no sandbox). The stack may be set later
  // (a stream link's VMM connects after start).
  PolicyReloader(base::EventLog& events, std::string path, base::UniqueFd file, bool reopen);

  void set_stack(GuestStack* stack) { stack_ = stack; }

  // The stats socket's "reload SOURCE" request: "0\n..." applied, "1\n..."
  // refused (nothing changed). file: the fd the client sent with it, or
  // none; a regular file holding exactly `text` (else the reload is refused),
  // kept once applied as the file SIGHUP rereads.
  std::string apply(std::string_view source, std::string_view text, base::UniqueFd file = {});
  // SIGHUP: the file again; the outcome goes to the event log (and stderr).
  void reread_file();

 private:
  base::EventLog& events_;
  std::string path_;
  base::UniqueFd file_;
  bool reopen_;
  GuestStack* stack_ = nullptr;
};

}  // namespace abox::netstack
