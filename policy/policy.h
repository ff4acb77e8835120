// Policy: one instance's egress policy, validated and immutable.
//
// Built only by parse_policy()/load_policy() (policy_file.h); nothing past
// policy/ sees TOML. Everything here is read-only after construction, so one
// Policy can be read by the DNS gate, admission and the broker of its
// instance without locks.
//
// What it answers, allocation-free:
//   allows_name(name)               may the DNS gate resolve this name at all?
//   admits(name, port, protocol)    which [[allow]] rule admits a flow (or none)
//   broker_for(name, port)          the [[broker]] binding that takes the flow
//   check_address(addr[, host])     reserved (or this host's own)? lifted by [unsafe]?
// Names passed in must be canonical (policy/name.h): the data path
// canonicalizes once at its edge.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policy/host_addresses.h"
#include "policy/ip_address.h"
#include "policy/name.h"
#include "policy/name_matcher.h"
#include "policy/reserved_ranges.h"

namespace abox::policy {

// Where something was written: for explain output and error messages.
struct SourceLocation {
  std::string file;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  std::string to_string() const;  // "file:line:column"
};

// icmp: echo requests (ping) only, IPv4 type 8 and ICMPv6 type 128; ports
// do not apply to it.
enum class Protocol : std::uint8_t { tcp = 1, udp = 2, icmp = 3 };
std::string_view to_string(Protocol p);

// A credential's name (a binding's `credential`, a name in the credential
// store): 1 to 128 letters, digits, '-', '_' or '.'.
bool valid_credential_name(std::string_view name);

struct PortRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  bool contains(std::uint16_t port) const { return port >= first && port <= last; }
  std::string to_string() const;
};

// An [[allow]] rule's egress budget: per window of `per_s` seconds, at most
// max_bytes_out bytes from the guest to its names and at most max_flows new
// flows (either may be absent). Past it, new flows to the rule's names are
// refused and live ones cut (netstack/stack/guest_stack.h).
struct Budget {
  std::optional<std::uint64_t> max_bytes_out;
  std::optional<std::uint32_t> max_flows;
  std::uint32_t per_s = 3600;
};

// One [[allow]] table.
struct AllowRule {
  std::size_t index = 0;  // 0-based, in file order
  std::vector<NamePattern> names;
  std::vector<PortRange> ports;
  bool tcp = true;
  bool udp = false;
  bool icmp = false;  // echo requests to the names, whatever the ports (never a default)
  // verify_name: unset means "on for ports 80 and 443 only".
  std::optional<bool> verify_name;
  std::optional<Budget> budget;  // set when max_bytes_out or max_flows is
  SourceLocation where;

  // For Protocol::icmp the port is not looked at: icmp is allowed or not.
  bool allows(std::uint16_t port, Protocol p) const;
  // Must a TCP flow on this port show a TLS SNI / HTTP Host naming the name
  // its address was answered for?
  bool requires_name(std::uint16_t port) const;
};

// One [[broker]] table: a name whose HTTPS goes to the TLS broker.
struct BrokerBinding {
  std::size_t index = 0;
  std::string name;  // canonical, exact (no wildcard)
  std::uint16_t port = 443;
  std::string credential;                  // the key's name in the daemon's store
  std::string header;                      // lower case, e.g. "x-api-key"
  std::string nonce_env;                   // the guest environment variable holding the nonce
  std::vector<std::string> methods;        // upper case, e.g. "POST"
  std::vector<std::string> path_prefixes;  // each starts with '/'
  bool allow_upgrade = false;
  // After the provider's 429 or 503 with Retry-After, the broker answers the
  // binding's new requests with 429 itself until then (broker/provider_backoff.h).
  bool backoff = true;
  SourceLocation where;
};

enum class DeniedAnswer : std::uint8_t { refused, nxdomain };

struct DnsSettings {
  bool use_system = true;           // upstreams = ["system"]: /etc/resolv.conf
  std::vector<Endpoint> upstreams;  // when not system
  std::uint32_t min_ttl = 5;        // seconds
  std::uint32_t max_ttl = 3600;
  std::uint32_t grace = 60;  // live flows outlive their answer this long
  DeniedAnswer denied = DeniedAnswer::refused;
  std::uint32_t timeout_ms = 2000;  // per upstream attempt
  std::uint32_t attempts = 2;       // rounds across all upstreams
};

struct Limits {
  std::uint32_t flows = 4096;
  std::uint32_t half_open = 256;
  std::uint32_t flow_buffer_bytes = 1u << 20;  // per flow, each direction
  std::uint32_t dns_in_flight = 256;
  std::uint32_t answer_entries = 16384;       // AnswerTable addresses
  std::uint32_t peek_bytes = 4096;            // bytes read looking for SNI / Host
  std::uint32_t http_head_bytes = 16384;      // broker: request head
  std::uint64_t http_body_bytes = 32u << 20;  // broker: request body
};

struct Timeouts {
  std::uint32_t connect_ms = 10000;
  std::uint32_t peek_ms = 5000;
  std::uint32_t tcp_idle_s = 600;
  std::uint32_t udp_idle_s = 60;
  std::uint32_t icmp_idle_s = 30;  // an echo flow (ping) without a request or reply this long
  // Broker deadlines, whatever arrives meanwhile (not reset by activity):
  std::uint32_t tls_handshake_ms =
      10000;  // accept (hand-off line included) to the end of the guest's TLS handshake
  std::uint32_t http_head_ms = 10000;  // a request head's first byte to its empty line
  std::uint32_t http_body_ms = 60000;  // the end of a request head to the end of its body
};

struct Unsafe {
  std::vector<Cidr> allow_reserved;  // test rigs only; every use is logged
  SourceLocation where;
};

// [mode]: how the policy is applied. audit: what the policy would refuse is
// let through and logged `would_deny` with its reason, except what is never
// liftable (reserved ranges, this host's addresses); for learning what an
// agent needs (abox policy suggest), never for production.
struct Mode {
  bool audit = false;
  SourceLocation where;  // of [mode]; line 0 when the file has none
};

struct AddressVerdict {
  const ReservedRange* reserved = nullptr;  // the range it falls in, if any
  const Cidr* lifted_by = nullptr;          // the [unsafe] entry lifting it, if any
  bool refused() const { return reserved != nullptr && lifted_by == nullptr; }
};

class Policy {
 public:
  const std::string& source() const { return source_; }
  std::span<const AllowRule> rules() const { return rules_; }
  std::span<const BrokerBinding> brokers() const { return brokers_; }
  const DnsSettings& dns() const { return dns_; }
  const Limits& limits() const { return limits_; }
  const Timeouts& timeouts() const { return timeouts_; }
  const Unsafe& unsafe() const { return unsafe_; }
  const Mode& mode() const { return mode_; }

  // May the DNS gate resolve this name (an [[allow]] or [[broker]] names it)?
  bool allows_name(std::string_view canonical) const { return matcher_.matches(canonical); }

  // The first rule, in file order of matching specificity (exact before
  // wildcard), that admits this name on this port and protocol; nullptr if
  // none. Broker bindings are not rules: see broker_for(). For
  // Protocol::icmp (echo) the port is ignored.
  const AllowRule* admits(std::string_view canonical, std::uint16_t port, Protocol p) const;

  const BrokerBinding* broker_for(std::string_view canonical, std::uint16_t port) const;

  AddressVerdict check_address(const IpAddress& a) const;
  // The same, and an address of this host (HostAddresses) is reserved too,
  // under HostAddresses::range(), and never lifted. What the data path uses:
  // the DNS gate's answer filter, admission, the broker's resolver.
  AddressVerdict check_address(const IpAddress& a, const HostAddresses& host) const;
  bool is_reserved(const IpAddress& a) const { return check_address(a).refused(); }

  // Every rule whose names match, in lookup order (for explain). fn returns
  // true to stop.
  template <class Fn>
  void for_each_rule_matching(std::string_view canonical, Fn&& fn) const {
    matcher_.for_each_match(canonical, [&](std::uint32_t id, bool wildcard) {
      if (id & kBrokerBit) return false;
      return fn(rules_[id], wildcard);
    });
  }

 private:
  friend class PolicyBuilder;
  static constexpr std::uint32_t kBrokerBit = 0x8000'0000u;

  Policy() = default;

  std::string source_;
  std::vector<AllowRule> rules_;
  std::vector<BrokerBinding> brokers_;
  DnsSettings dns_;
  Limits limits_;
  Timeouts timeouts_;
  Unsafe unsafe_;
  Mode mode_;
  NameMatcher matcher_;  // ids: rule index, or kBrokerBit | broker index
};

}  // namespace abox::policy
