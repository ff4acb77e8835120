// Explaining a policy: whether it admits a name, a name and port, an
// address or an address and port, and why. `abox policy explain` prints it;
// `abox-net explain` adds what a running abox-net knows now (the DNS
// gate's answers) to the same judgement.
//
// What each kind of target is judged against:
//   NAME            may the DNS gate resolve it (an [[allow]] or [[broker]]
//                   names it)? verdict resolvable or refused.
//   NAME:PORT       the [[broker]] binding that takes it (TCP), else the
//                   [[allow]] rule whose ports and protocols admit it;
//                   verdict brokered, allowed or refused.
//   ADDRESS         a reserved range refuses it; otherwise it can only be
//                   reached through a DNS answer: answer-required.
//   ADDRESS:PORT    as ADDRESS, and then the port and protocol must be
//                   allowed by some rule (or taken by a binding): when none
//                   does, refused whatever the DNS gate answers; when some
//                   do, answer-required, naming the names whose answer
//                   with this address would admit it.
// answer-required is not "allowed": allowed() is false for it, and the
// CLI gives it an exit code of its own (docs/cli.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "policy/policy.h"

namespace abox::policy {

// What `explain` was asked about, split into what it names.
struct ExplainTarget {
  std::string text;                   // as given
  std::optional<IpAddress> address;   // set for ADDRESS and ADDRESS:PORT
  std::string name;                   // as written, for NAME and NAME:PORT
  std::optional<std::uint16_t> port;  // 1-65535 when given

  // NAME, NAME:PORT, ADDRESS, ADDRESS:PORT or [IPV6]:PORT; nullopt when it
  // is none of these (a port of 0 or past 65535 included).
  static std::optional<ExplainTarget> parse(std::string_view text);
  bool is_address() const { return address.has_value(); }
};

enum class Verdict : std::uint8_t { allowed, brokered, resolvable, answer_required, refused };
// "allowed", "brokered", "resolvable", "answer-required", "refused".
std::string_view to_string(Verdict v);

struct Explanation {
  Verdict verdict = Verdict::refused;
  std::string reason;
  std::vector<std::string> details;
  const AllowRule* rule = nullptr;  // the rule that admits a NAME:PORT
  bool rule_wildcard = false;
  std::string rule_pattern;  // the name pattern of `rule` that matched
  const BrokerBinding* broker = nullptr;
  const ReservedRange* reserved = nullptr;
  const Cidr* lifted_by = nullptr;
  std::optional<bool> name_check;  // must the TLS SNI / HTTP Host name it?
  // ADDRESS:PORT: the rules whose ports and protocols allow it, and the
  // bindings on its port; a DNS answer for one of their names with this
  // address is what a flow needs.
  std::vector<const AllowRule*> port_rules;
  std::vector<const BrokerBinding*> port_brokers;

  // allowed, brokered or resolvable: the policy says yes outright.
  bool allowed() const;
};

Explanation explain(const Policy& policy, const ExplainTarget& target, Protocol protocol);

// The explanation's own fields into an open JSON object: verdict, allowed,
// reason, and where they apply rule, name_check, broker, reserved,
// port_rules (ADDRESS:PORT), then details.
void write_explanation_fields(base::JsonWriter& w, const Explanation& e);

}  // namespace abox::policy
