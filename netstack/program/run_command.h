// `abox-net run`: the appliance for one guest (tap in a namespace, or a tap fd).
#pragma once

#include <span>
#include <string_view>

namespace abox::netstack {

int run_run_command(std::span<const std::string_view> args);

}  // namespace abox::netstack
