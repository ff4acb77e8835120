// The guest's network interfaces, configured the old way (SIOC* ioctls on an
// AF_INET socket, SIOCADDRT for the route): a handful of calls made once at
// boot, with nothing to parse coming back. Each returns what failed, with
// errno's text, for the hello's network line and the console.
//
// Setting the address and then the mask also installs the subnet's route
// (the kernel does so for an address set by ioctl); the default route is
// added after, through the router in that subnet.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::guest {

using NetResult = base::Result<void, std::string>;

bool interface_exists(std::string_view ifname);
NetResult set_link_up(std::string_view ifname);
base::Result<std::array<std::uint8_t, 6>, std::string> hardware_address(std::string_view ifname);
base::Result<int, std::string> interface_index(std::string_view ifname);
NetResult set_mtu(std::string_view ifname, unsigned mtu);
// address in host byte order; prefix 1..32.
NetResult set_ipv4_address(std::string_view ifname, std::uint32_t address, unsigned prefix);
NetResult add_default_route(std::string_view ifname, std::uint32_t gateway);

// resolv.conf text: "nameserver A.B.C.D" per server (host byte order).
std::string resolv_conf_text(std::span<const std::uint32_t> servers);
// Writes `text` to `path` atomically (a temp file beside it, then rename),
// mode 0644.
NetResult write_file_atomically(const std::string& path, std::string_view text, unsigned mode = 0644);

}  // namespace abox::guest
