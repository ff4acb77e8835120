#include "guest/box_guest/network_setup.h"

#include <time.h>

#include <span>

#include "guest/box_guest/console.h"
#include "guest/box_guest/interface_config.h"

namespace abox::guest {
namespace {

NetworkState failed(std::string why) {
  console_line("network: " + why);
  NetworkState s;
  s.summary = std::move(why);
  if (s.summary.size() > 256) s.summary.resize(256);  // the hello's cap
  return s;
}

}  // namespace

NetworkState bring_up_network(const NetworkSetupOptions& options, base::RandomSource& random) {
  if (auto r = set_link_up("lo"); !r.ok()) console_line("network: lo: " + r.error());

  const std::string& ifname = options.interface;
  const std::int64_t wait_end = monotonic_ms() + options.interface_wait_ms;
  while (!interface_exists(ifname)) {
    if (monotonic_ms() >= wait_end) return failed("no interface " + ifname);
    const timespec step{0, 20'000'000};
    ::nanosleep(&step, nullptr);
  }
  if (auto r = set_link_up(ifname); !r.ok()) return failed(r.error());

  auto lease = lease_by_dhcp(ifname, options.dhcp, random);
  if (!lease.ok()) return failed("dhcp: " + lease.error());
  const DhcpReply& l = *lease;

  // The mask is optional in DHCP; the gateway always sends it. Without it,
  // a /24 (what abox-net and passt hand out) and the line says so.
  const unsigned prefix = l.prefix_len.value_or(24);
  if (l.mtu) {
    if (auto r = set_mtu(ifname, *l.mtu); !r.ok()) return failed(r.error());
  }
  if (auto r = set_ipv4_address(ifname, l.your_address, prefix); !r.ok()) return failed(r.error());
  if (l.router) {
    if (auto r = add_default_route(ifname, *l.router); !r.ok()) return failed(r.error());
  }
  std::span<const std::uint32_t> dns(l.dns.data(), l.dns_count);
  if (auto r = write_file_atomically(options.resolv_conf, resolv_conf_text(dns)); !r.ok())
    return failed(r.error());

  NetworkState s;
  s.up = true;
  s.address = l.your_address;
  if (l.dns_count > 0) s.dns_server = l.dns[0];
  s.summary =
      ipv4_text(l.your_address) + "/" + std::to_string(prefix) + (l.prefix_len ? "" : " (no mask given)");
  if (l.router) s.summary += " via " + ipv4_text(*l.router);
  for (std::size_t i = 0; i < l.dns_count; ++i) s.summary += (i == 0 ? " dns " : ",") + ipv4_text(l.dns[i]);
  if (l.mtu) s.summary += " mtu " + std::to_string(*l.mtu);
  console_line("network: " + s.summary + " (lease from " + ipv4_text(l.server_id) + ")");
  return s;
}

}  // namespace abox::guest
