// `abox cp NAME:GUEST_PATH -`: a file or folder of a running instance, as a
// tar stream on stdout and nothing else. abox never unpacks it, never follows
// anything in it, and stops at --max-bytes (THREATS.md, rule 1: the host runs
// no tool on guest bytes; the operator's own tar may, by choice, afterwards).
#pragma once

#include <span>
#include <string_view>

namespace abox::engine {

int run_cp_command(std::span<const std::string_view> args);

}  // namespace abox::engine
