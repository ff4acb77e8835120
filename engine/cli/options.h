// The engine's commands parse their options with the parser every abox
// program shares (base/command_line.h: --opt value and --opt=value, short
// flags, "--", one-line usage errors). This header only brings its names
// into abox::engine, so a command writes OptionSpec and parse_options as it
// did when the parser lived here.
#pragma once

#include "base/command_line.h"

namespace abox::engine {

using base::OptionSpec;
using base::parse_options;
using base::ParsedArgs;
using base::ParsedOption;

}  // namespace abox::engine
