// Fuzz target: the credential store's text (broker/credential_file.h), read
// through the one TOML unit (policy/toml_tables.h). Whatever the input: no
// crash; a store that parses formats to text that parses back to the same
// entries (what `abox credentials set` writes, the broker reads as written).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "broker/credential_file.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using abox::broker::CredentialFile;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = CredentialFile::parse(text, "fuzz.toml");
  if (!parsed.ok()) return 0;
  const std::string formatted = parsed->format();
  auto again = CredentialFile::parse(formatted, "formatted.toml");
  check(again.ok());
  check(again->entries() == parsed->entries());
  return 0;
}
