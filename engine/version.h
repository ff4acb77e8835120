// The version of this build of abox: the CMake project's VERSION (the root
// CMakeLists.txt), compiled into version.cc and nowhere else. `abox
// --version`, the daemon's answer to `ping` and `abox doctor` (which compares
// the two) all read it here, so a daemon and a CLI of one build can never
// name different versions.
#pragma once

#include <string_view>

namespace abox::engine {

std::string_view abox_version();

}  // namespace abox::engine
