#include "policy/toml_tables.h"

#include "policy/toml.h"

namespace abox::policy {

base::Result<std::vector<TomlTable>, std::string> read_toml_tables(std::string_view text,
                                                                   const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return base::Err{source + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
  }
  std::vector<TomlTable> out;
  for (auto& [k, v] : root) {
    TomlTable t;
    t.name = std::string(k.str());
    if (toml::table* inner = v.as_table()) {
      t.is_table = true;
      for (auto& [name, value] : *inner) {
        TomlStringEntry e;
        e.key = std::string(name.str());
        if (auto* s = value.as_string()) e.text = std::move(s->get());
        t.entries.push_back(std::move(e));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace abox::policy
