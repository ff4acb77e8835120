// Command-line options the way users expect them from pasta, podman and
// friends, for every abox program (abox, abox-net): `--opt value` and
// `--opt=value`, short flags (`-e NAME=VALUE`, `-eNAME=VALUE`, `-i`), `--` to
// end the options, and every mistake reported in one line that ends with
// where to read more ("see 'abox run --help'"), never the whole help.
//
// The parser knows each option's spellings and whether it takes a value; what
// the values mean is the command's business. It never reorders: options and
// values come back in the order given, so a repeated option (--env) keeps
// its order. Std only (base/), so netstack/ and engine/ share it.
#pragma once

#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::base {

struct OptionSpec {
  std::string_view name;  // "--name" spelling without the dashes ("name")
  char short_name = 0;    // 'n' for -n, 0 for none
  bool takes_value = false;
};

struct ParsedOption {
  std::string_view name;  // OptionSpec::name
  std::string value;      // "" for a flag
};

struct ParsedArgs {
  std::vector<ParsedOption> options;
  std::vector<std::string> positionals;  // everything after "--", or from the first non-option
  bool help = false;
  // The names parse_options was given. Asking has/last/all for a name not
  // among them throws std::logic_error: an option a command reads but never
  // declared would otherwise be refused as unknown with no test noticing.
  std::vector<std::string_view> declared;
  bool dash_dash = false;  // "--" was given: positionals after it are a command, not options

  bool has(std::string_view name) const;
  // The last value given for name, if any.
  std::optional<std::string> last(std::string_view name) const;
  std::vector<std::string> all(std::string_view name) const;
};

// Parses args against specs. -h and --help set help (and stop). With
// stop_at_positional, the first argument that is not an option starts the
// positionals (for `abox run [options] CMD ARGS...`); otherwise a
// non-option argument is a positional and parsing goes on. "--" always ends
// the options: what follows is positional, whatever it looks like. The
// error is one line: "unknown option '--foo'", "--name needs a value", ...
base::Result<ParsedArgs, std::string> parse_options(std::span<const std::string_view> args,
                                                    std::span<const OptionSpec> specs,
                                                    bool stop_at_positional);

// The one line a usage error prints: "COMMAND: MESSAGE (see 'COMMAND --help')",
// with a newline. COMMAND is what the user typed, e.g. "abox-net run".
std::string usage_error_line(std::string_view command, std::string_view message);

// How a command starts: parse_options(), then a mistake prints its usage
// error line on err and -h/--help the command's usage on out. The error
// side of the result is the exit status to return at once: 2 for a usage
// error, 0 after the help. The commands' own checks (how many positionals)
// come after.
base::Result<ParsedArgs, int> start_command(std::string_view command, std::string_view usage,
                                            std::span<const std::string_view> args,
                                            std::span<const OptionSpec> specs, std::ostream& out,
                                            std::ostream& err);

}  // namespace abox::base
