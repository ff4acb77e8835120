// read_toml_tables: a TOML document read as what a small store holds: top
// level keys, each a table of string values (the broker's credential store,
// broker/credential_file.h). The caller decides which names it knows; this
// says only what each key holds, so that no toml++ type leaves policy/.
//
// Invariants: entries are in key order (toml++'s tables are sorted); a
// value that is not a string (a number, a table, an array, a dotted key's
// table) has no text; a top-level key that is not a table has no entries.
// A parse error names the source and line and says why, never quoting the
// text (the store holds keys): toml++ reports position and reason only.
// Values are copies the caller owns (and wipes when they are secret);
// toml++'s own tree is freed before this returns.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::policy {

struct TomlStringEntry {
  std::string key;
  std::optional<std::string> text;  // none: the value is not a string
};

struct TomlTable {
  std::string name;
  bool is_table = false;
  std::vector<TomlStringEntry> entries;
};

base::Result<std::vector<TomlTable>, std::string> read_toml_tables(std::string_view text,
                                                                   const std::string& source);

}  // namespace abox::policy
