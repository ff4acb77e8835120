#include "engine/version.h"

// Set for this one file by engine/CMakeLists.txt from PROJECT_VERSION; a
// build without it is a build error, never a silent "unknown".
#ifndef ABOX_VERSION
#error "ABOX_VERSION is not defined: engine/CMakeLists.txt sets it from the project's VERSION"
#endif

namespace abox::engine {

std::string_view abox_version() {
  return ABOX_VERSION;
}

}  // namespace abox::engine
