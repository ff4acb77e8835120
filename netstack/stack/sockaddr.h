// Conversions between policy::Endpoint and the kernel's socket addresses.
#pragma once

#include <sys/socket.h>

#include <optional>

#include "policy/ip_address.h"

namespace abox::netstack {

// Fills `ss` for ep; returns the address length to pass to the kernel.
socklen_t to_sockaddr(const policy::Endpoint& ep, sockaddr_storage& ss);
std::optional<policy::Endpoint> from_sockaddr(const sockaddr_storage& ss);

}  // namespace abox::netstack
