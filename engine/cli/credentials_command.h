// `abox credentials set|ls|rm`: the operator's credential store, the one
// file the daemon hands each broker its instance's keys from.
//
// The store is broker::CredentialFile's format and rules (credential_file.h):
// one TOML file, mode 0600, owned by the operator; a store that breaks a rule
// (a symlink, another owner, group or other bits) is refused, never fixed or
// rewritten. Where it is: --store FILE, else $ABOX_CREDENTIALS, else
// $XDG_CONFIG_HOME/abox/credentials.toml, else ~/.config/abox/credentials.toml.
//
//   set NAME   reads the key from in_fd: on a terminal, one line with echo
//              off (and Ctrl-C read as a character that cancels, so the
//              terminal is never left without echo); otherwise all of it, at
//              most 4096 bytes, one final LF (or CRLF) dropped. Never from
//              argv: a second argument is a usage error that says why.
//   ls         names, whether each is stored, and the bindings that use it:
//              the policies of the instance folders
//              ($XDG_STATE_HOME/abox/instances/*/policy.toml) and every
//              --policy FILE; a name a policy binds but the store lacks is
//              listed as missing. Never a key. --json for scripts.
//   rm NAME... removes them, all or none (an unknown name changes nothing).
//
// set and rm read, change and write the store under an exclusive flock on its
// folder, so two of them at once do not lose each other's change; the write
// is atomic (CredentialFile::write).
//
// Exit status: 0 done, 1 rm of a name the store does not have, 2 usage
// error, 3 the store cannot be read or written (the message says why).
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::engine {

// The store's path when no --store is given.
base::Result<std::string, std::string> default_credentials_path();

// args: everything after "abox credentials". in_fd: where `set` reads the key.
int run_credentials_command(std::span<const std::string_view> args, int in_fd, std::ostream& out,
                            std::ostream& err);

}  // namespace abox::engine
