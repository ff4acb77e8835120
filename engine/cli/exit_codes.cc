#include "engine/cli/exit_codes.h"

namespace abox::engine {

bool is_help_flag(std::string_view s) {
  return s == "-h" || s == "--help";
}

}  // namespace abox::engine
