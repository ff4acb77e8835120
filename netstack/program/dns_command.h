// `abox-net dns`: the DNS gate alone on a host socket.
#pragma once

#include <span>
#include <string_view>

namespace abox::netstack {

int run_dns_command(std::span<const std::string_view> args);

}  // namespace abox::netstack
