// GuestStack's echo requests (ping) to anything but the gateway: admitted
// like a UDP flow's first datagram and relayed by an EchoFlow (echo_flow.h),
// one per guest address, echo id and destination. See guest_stack.h for the
// whole path.
//
// The life of one echo request here: a frame that passed the checks every
// frame gets (GuestFrame::parse(); IPv4: not a fragment, the guest's own
// source; IPv6: ipv6_guest_checks.h, IPv6 flows on, no extension headers)
// and is an echo request to an address that is not the gateway's comes to
// take_echo() instead of lwIP (which answers the gateway's own echo). It is
// parsed (parse_echo_request(): header, type, code, checksum); a flow with
// its key takes it; otherwise, within [limits] flows, admission decides
// (admit_flow() with Protocol::icmp: not reserved, not this host's, an
// unexpired answer for a name whose rule allows icmp); audit mode lets
// through what the policy would refuse, as for UDP. An admitted echo makes
// an EchoFlow, whose ping socket may be refused by the kernel
// (net.ipv4.ping_group_range excludes abox-net's group: EACCES), which
// refuses the echo as echo_not_permitted (logged once, with the sysctl that
// enables it). Every refusal answers the guest with an ICMP(v6)
// administratively prohibited error from the gateway, within the same token
// bucket as UDP's (icmp_errors_), so `ping` says "Packet filtered" at once
// instead of timing out. Echo flows spend no egress budget.
#include <cerrno>

#include "netstack/stack/admission.h"
#include "netstack/stack/echo_message.h"
#include "netstack/stack/guest_frame.h"
#include "netstack/stack/guest_stack.h"

namespace abox::netstack {

namespace {
constexpr std::uint8_t kProtoIcmp = 1;

policy::IpAddress source_of(const GuestFrame& frame) {
  if (frame.is_ipv6()) return policy::IpAddress::v6(frame.ipv6().source);
  const std::uint32_t net = frame.ipv4().source_net;
  return policy::IpAddress::v4_bytes(reinterpret_cast<const std::uint8_t*>(&net));
}

policy::IpAddress destination_of(const GuestFrame& frame) {
  if (frame.is_ipv6()) return policy::IpAddress::v6(frame.ipv6().destination);
  const std::uint32_t net = frame.ipv4().destination_net;
  return policy::IpAddress::v4_bytes(reinterpret_cast<const std::uint8_t*>(&net));
}
}  // namespace

bool GuestStack::is_relayed_echo_v4(const GuestFrame& frame) const {
  const Ipv4Fields& ip = frame.ipv4();
  if (ip.protocol != kProtoIcmp || ip.fragment || ip.payload.empty()) return false;
  if (ip.payload.front() != kIcmpEchoRequest) return false;
  // The gateway's own address, and broadcast, stay lwIP's (and its hook's).
  const policy::IpAddress dst = destination_of(frame);
  return dst != config_.gateway && dst.v4_value() != 0xFFFF'FFFFu;
}

void GuestStack::take_echo(const GuestFrame& frame) {
  const policy::IpAddress src = source_of(frame);
  const policy::IpAddress dst = destination_of(frame);
  const std::span<const std::uint8_t> message =
      frame.is_ipv6() ? frame.ipv6().upper_layer : frame.ipv4().payload;
  const auto request = parse_echo_request(message, src, dst);
  if (!request.ok()) {
    drop(DropReason::frame_malformed);
    return;
  }
  const EchoFlowKey key{src, request->id, dst};
  if (auto it = echo_flows_.find(key); it != echo_flows_.end()) {
    it->second->from_guest(request->sequence, request->payload);
    return;
  }
  const policy::Endpoint to{dst, 0};
  if (flows_now() >= policy_->limits().flows) {
    drop(DropReason::flows, "icmp", &to);
    return;
  }
  Admission a = admit_flow(*policy_, host_addresses_, table_, dst, 0, policy::Protocol::icmp, loop_.now());
  const bool audited = !a.admitted() && audit_lifts(*a.refusal);
  if (!a.admitted() && !audited) {
    refuse_echo(*a.refusal, frame, src, dst);
    return;
  }
  const std::string name = audited ? audited_name(dst) : std::string(a.name);
  if (audited) would_deny(describe(*a.refusal), "icmp", to, name);
  if (dst.is_v6() && !host_has_route(to)) {
    refuse_echo(DropReason::no_route, frame, src, dst, name);
    return;
  }
  if (a.lifted != nullptr && events_.reserve_line()) {
    events_.write_reserved("unsafe",
                           {{"reason", "flow to a reserved range lifted by [unsafe] allow_reserved"},
                            {"dst", dst.to_string()},
                            {"range", a.lifted->range.to_string()}});
  }
  auto flow = std::make_unique<EchoFlow>(*this, key, frame.source_mac(), name, audited);
  if (auto started = flow->start(); !started.ok()) {
    const int err = started.error();
    refuse_echo(
        err == EACCES || err == EPERM ? DropReason::echo_not_permitted : DropReason::host_socket_failed,
        frame, src, dst, name);
    return;
  }
  ++counters_.echo_admitted;
  if (events_.reserve_line())
    events_.write_reserved("admit", {{"reason", audited ? "audit mode: would be denied" : "answered name"},
                                     {"name", name},
                                     {"dst", dst.to_string()},
                                     {"proto", "icmp"}});
  EchoFlow* raw = flow.get();
  echo_flows_.emplace(key, std::move(flow));
  raw->from_guest(request->sequence, request->payload);
}

void GuestStack::refuse_echo(DropReason why, const GuestFrame& frame, const policy::IpAddress& src,
                             const policy::IpAddress& dst, std::string_view name) {
  // drop() writes an echo's dst as the address alone: echo has no port.
  const policy::Endpoint to{dst, 0};
  drop(why, "icmp", &to, name);
  if (!icmp_errors_.take(loop_.now())) {
    ++counters_.icmp_unreachable_limited;
    return;
  }
  // From the gateway: IPv4's address, or the gateway's address in the
  // guest's own scope (link-local to a link-local source).
  const policy::IpAddress from =
      dst.is_v6()
          ? policy::IpAddress::v6(
                src.bytes()[0] == 0xFE && (src.bytes()[1] & 0xC0) == 0x80 ? ndp_.link_local() : ndp_.global())
          : config_.gateway;
  const std::span<const std::uint8_t> packet = frame.is_ipv6() ? frame.ipv6().packet : frame.ipv4().packet;
  const GuestLink link{config_.gateway_mac, frame.source_mac()};
  if (link_.send(prohibited_frame(link, from, src, packet)).ok()) ++counters_.icmp_unreachable_sent;
}

void GuestStack::sweep_echo(base::MonoTime now) {
  sweep_echo_.clear();
  for (auto& [_, f] : echo_flows_) sweep_echo_.push_back(f.get());
  for (EchoFlow* f : sweep_echo_) f->check_idle(now);
}

std::size_t GuestStack::recheck_echo(const policy::Policy& now_in_force) {
  std::size_t revoked = 0;
  sweep_echo_.clear();
  for (auto& [_, f] : echo_flows_) sweep_echo_.push_back(f.get());
  for (EchoFlow* f : sweep_echo_) {
    if (f->finished()) continue;
    const policy::Endpoint dst{f->destination(), 0};
    if (recheck_flow(now_in_force, host_addresses_, dst.address, 0, policy::Protocol::icmp, f->name(), false)
            .allowed)
      continue;
    if (audit()) {
      would_deny(describe(DropReason::policy_revoked), "icmp", dst, f->name());
      continue;
    }
    drop(DropReason::policy_revoked, "icmp", &dst, f->name());
    f->cut();
    ++revoked;
  }
  return revoked;
}

void GuestStack::retire(EchoFlow* flow) {
  auto it = echo_flows_.find(flow->key());
  if (it == echo_flows_.end()) return;
  if (events_.reserve_line())
    events_.write_reserved("close", {{"name", flow->name()},
                                     {"dst", flow->destination().to_string()},
                                     {"proto", "icmp"},
                                     {"requests", flow->requests()},
                                     {"replies", flow->replies()},
                                     {"bytes_out", flow->bytes_out()},
                                     {"bytes_in", flow->bytes_in()}});
  loop_.delete_later(std::move(it->second));
  echo_flows_.erase(it);
}

bool GuestStack::send_to_guest(std::span<const std::uint8_t> frame) {
  return link_alive_ && link_.send(frame).ok();
}

}  // namespace abox::netstack
