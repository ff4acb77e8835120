// The system's resolvers, for [dns] upstreams = ["system"]: the
// `nameserver` lines of /etc/resolv.conf (resolv.conf(5)), in order, port 53.
// Lines with a zone id (fe80::1%eth0) are skipped: a link-local upstream
// cannot be reached from the host's sockets without its interface.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "policy/ip_address.h"

namespace abox::dns {

std::vector<policy::Endpoint> parse_resolv_conf(std::string_view text);

// Reads the file; an unreadable file yields an empty list (the caller says
// that no upstream is configured).
std::vector<policy::Endpoint> read_resolv_conf(const std::string& path = "/etc/resolv.conf");

}  // namespace abox::dns
