// Brings the guest's network up at boot, in order: loopback up; wait (at
// most `interface_wait_ms`) for the NIC, which appears once virtio_net is
// loaded; NIC up; a lease by DHCP (dhcp_client.h); then MTU, address and
// prefix, default route, and resolv.conf, all from the lease.
//
// resolv.conf is written to `resolv_conf` (/run/resolv.conf: /run is a
// tmpfs; the image links /etc/resolv.conf there), so nothing on the image
// itself changes.
//
// Never fatal: without a network box-guest still reports to the host, which
// decides. `summary` is the hello's network line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/random.h"
#include "guest/box_guest/dhcp_client.h"

namespace abox::guest {

struct NetworkState {
  bool up = false;
  std::string summary;  // "10.0.2.15/24 via 10.0.2.2 dns 10.0.2.2 mtu 65520", or what failed
  std::uint32_t address = 0;
  std::optional<std::uint32_t> dns_server;  // the first the lease named
};

struct NetworkSetupOptions {
  std::string interface = "eth0";
  std::string resolv_conf = "/run/resolv.conf";
  int interface_wait_ms = 5000;
  DhcpClientLimits dhcp;
};

NetworkState bring_up_network(const NetworkSetupOptions& options, base::RandomSource& random);

}  // namespace abox::guest
