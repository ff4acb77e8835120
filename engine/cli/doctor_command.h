// `abox doctor [--json]`: whether this host can run abox, item by item
// (engine/doctor/host_checks.h says what each probe does). Each item is
// printed as OK, DEGRADED (and what that costs) or MISSING (and the fix).
//
// Exit status: 0 nothing is MISSING, 1 something is, 2 usage error.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace abox::engine {

// args: everything after "abox doctor".
int run_doctor_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace abox::engine
