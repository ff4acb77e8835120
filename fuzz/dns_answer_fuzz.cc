#include "tests/support/ldns.h"
// clang-format on

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "base/byte_reader.h"
#include "dns/answer_filter.h"
#include "dns/name.h"
#include "policy/host_addresses.h"
#include "policy/policy_file.h"

namespace {

using abox::dns::AskedQuestion;
using abox::dns::FilteredAnswer;
using abox::policy::IpAddress;
using abox::policy::Policy;

struct RrFree {
  void operator()(ldns_rr* rr) const { ldns_rr_free(rr); }
};
struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};

const Policy& fuzz_policy() {
  static const Policy p = [] {
    auto r = abox::policy::parse_policy(
        "[[allow]]\nnames=[\"example.com\",\"*.example.com\"]\nports=[443]\n"
        "[dns]\nmin_ttl=30\nmax_ttl=600\n"
        "[unsafe]\nallow_reserved=[\"127.0.0.0/8\"]\n",
        "fuzz.toml");
    if (!r.ok()) __builtin_trap();  // the fixed policy must parse
    return std::move(r).value();
  }();
  return p;
}

// This host's addresses, as a gate would have them: a public one, one the
// policy's [unsafe] would lift, an IPv6 one (removed whatever the policy).
const abox::policy::HostAddresses& fuzz_host_addresses() {
  static const abox::policy::HostAddresses h = [] {
    abox::policy::HostAddresses out;
    for (const char* a : {"93.184.216.34", "127.0.0.53", "2001:db8::1"}) {
      if (!out.add(*IpAddress::parse(a))) __builtin_trap();
    }
    return out;
  }();
  return h;
}

// The message's own question, or example.com A.
AskedQuestion own_question(std::span<const std::uint8_t> msg, std::vector<std::uint8_t>& name_storage) {
  static const std::array<std::uint8_t, 13> kExample = {7,   'e', 'x', 'a', 'm', 'p', 'l',
                                                        'e', 3,   'c', 'o', 'm', 0};
  AskedQuestion q;
  q.qtype = 1;
  q.qclass = 1;
  name_storage.assign(kExample.begin(), kExample.end());
  if (msg.size() >= 2) q.id = static_cast<std::uint16_t>((msg[0] << 8) | msg[1]);
  if (msg.size() > 12) {
    std::size_t pos = 12;
    ldns_rr* raw = nullptr;
    if (ldns_wire2rr(&raw, msg.data(), msg.size(), &pos, LDNS_SECTION_QUESTION) == LDNS_STATUS_OK) {
      std::unique_ptr<ldns_rr, RrFree> rr(raw);
      const ldns_rdf* owner = ldns_rr_owner(rr.get());
      name_storage.assign(ldns_rdf_data(owner), ldns_rdf_data(owner) + ldns_rdf_size(owner));
      q.qtype = static_cast<std::uint16_t>(ldns_rr_get_type(rr.get()));
      q.qclass = static_cast<std::uint16_t>(ldns_rr_get_class(rr.get()));
    }
  }
  q.qname_wire = name_storage;
  return q;
}

bool ttl_ok(std::uint32_t ttl, const Policy& p) {
  return ttl >= p.dns().min_ttl && ttl <= p.dns().max_ttl;
}

std::optional<IpAddress> address_of(const ldns_rr* rr) {
  const ldns_rdf* rd = ldns_rr_rdf(rr, 0);
  if (rd == nullptr) return std::nullopt;
  if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_A && ldns_rdf_size(rd) == 4)
    return IpAddress::v4_bytes(ldns_rdf_data(rd));
  if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_AAAA && ldns_rdf_size(rd) == 16) {
    std::array<std::uint8_t, 16> b{};
    std::copy_n(ldns_rdf_data(rd), 16, b.begin());
    return IpAddress::v6(b);
  }
  return std::nullopt;
}

// Types whose RDATA both dns/rdata.h and ldns read field by field; for any
// other type ldns may expect a shape that we (rightly, RFC 3597) copy as
// opaque bytes, so ldns's reading of it says nothing about us.
bool both_read(std::uint16_t type) {
  static constexpr std::array<std::uint16_t, 27> kTypes = {
      1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18, 21, 24, 26, 28, 30, 33, 35, 39, 41, 46, 47};
  return std::find(kTypes.begin(), kTypes.end(), type) != kTypes.end();
}

// Our own walk of the answer: every record's section and type. Traps when
// it does not walk (counts, names, RDLENGTH) exactly to the end.
struct WalkedRecord {
  std::size_t section;
  std::uint16_t type;
  std::uint32_t ttl;
  std::span<const std::uint8_t> rdata;
};
std::vector<WalkedRecord> walk(std::span<const std::uint8_t> wire) {
  abox::base::ByteReader r(wire);
  std::array<std::uint16_t, 4> counts{};
  if (!r.skip(4)) __builtin_trap();
  for (auto& c : counts) c = r.u16be().value_or(0xFFFF);
  if (counts[0] != 1) __builtin_trap();
  if (abox::dns::read_name(r, nullptr) || !r.skip(4)) __builtin_trap();
  std::vector<WalkedRecord> out;
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::uint16_t i = 0; i < counts[s + 1]; ++i) {
      if (abox::dns::read_name(r, nullptr)) __builtin_trap();
      auto type = r.u16be();
      auto cls = r.u16be();
      auto ttl = r.u32be();
      auto length = r.u16be();
      auto rdata = length ? r.bytes(*length) : std::nullopt;
      if (!type || !cls || !ttl || !rdata) __builtin_trap();
      out.push_back({s, *type, *ttl, *rdata});
    }
  }
  if (!r.empty()) __builtin_trap();
  return out;
}

void check_wire(const FilteredAnswer& a, const Policy& p) {
  if (a.wire.size() < 12 || a.wire.size() > 65535) __builtin_trap();
  if (a.wire[0] != 0 || a.wire[1] != 0) __builtin_trap();
  if (((a.wire[2] & 0x02) != 0) != a.truncated) __builtin_trap();
  bool ldns_reads_all = true;
  for (const WalkedRecord& rr : walk(a.wire)) {
    ldns_reads_all = ldns_reads_all && both_read(rr.type);
    if (rr.type == 41) {
      if (rr.section != 2 || !rr.rdata.empty()) __builtin_trap();  // our own OPT, no options
      continue;
    }
    if (rr.type == LDNS_RR_TYPE_HTTPS || rr.type == LDNS_RR_TYPE_SVCB) __builtin_trap();
    if (rr.type >= 128 && rr.type <= 255) __builtin_trap();  // TSIG, TKEY, ...
    if (!ttl_ok(rr.ttl, p)) __builtin_trap();
    if (rr.type != LDNS_RR_TYPE_A && rr.type != LDNS_RR_TYPE_AAAA) continue;
    if (rr.section != 0) __builtin_trap();  // no glue
    std::optional<IpAddress> ip;
    if (rr.type == LDNS_RR_TYPE_A && rr.rdata.size() == 4) ip = IpAddress::v4_bytes(rr.rdata.data());
    if (rr.type == LDNS_RR_TYPE_AAAA && rr.rdata.size() == 16) {
      std::array<std::uint8_t, 16> b{};
      std::copy(rr.rdata.begin(), rr.rdata.end(), b.begin());
      ip = IpAddress::v6(b);
    }
    if (!ip) __builtin_trap();  // a malformed address record reached the guest
    bool answered = std::any_of(a.addresses.begin(), a.addresses.end(),
                                [&](const abox::dns::AnsweredAddress& x) { return x.address == *ip; });
    if (!answered) __builtin_trap();  // the guest would see an address nobody vetted
  }
  if (!ldns_reads_all) return;
  // ldns, an independent decoder, must read the same answer.
  ldns_pkt* raw = nullptr;
  if (ldns_wire2pkt(&raw, a.wire.data(), a.wire.size()) != LDNS_STATUS_OK) __builtin_trap();
  std::unique_ptr<ldns_pkt, PktFree> pkt(raw);
  if (ldns_pkt_id(pkt.get()) != 0) __builtin_trap();
  if (static_cast<bool>(ldns_pkt_tc(pkt.get())) != a.truncated) __builtin_trap();
  const std::array<ldns_rr_list*, 3> sections = {ldns_pkt_answer(pkt.get()), ldns_pkt_authority(pkt.get()),
                                                 ldns_pkt_additional(pkt.get())};
  for (std::size_t s = 0; s < sections.size(); ++s) {
    for (std::size_t i = 0; i < ldns_rr_list_rr_count(sections[s]); ++i) {
      const ldns_rr* rr = ldns_rr_list_rr(sections[s], i);
      const ldns_rr_type t = ldns_rr_get_type(rr);
      if (!ttl_ok(ldns_rr_ttl(rr), p)) __builtin_trap();
      if (t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) continue;
      auto ip = address_of(rr);
      if (s != 0 || !ip) __builtin_trap();
      bool answered = std::any_of(a.addresses.begin(), a.addresses.end(),
                                  [&](const abox::dns::AnsweredAddress& x) { return x.address == *ip; });
      if (!answered) __builtin_trap();
    }
  }
  if (ldns_pkt_tsig(pkt.get()) != nullptr) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Policy& policy = fuzz_policy();
  std::span<const std::uint8_t> msg(data, size);
  std::vector<std::uint8_t> name;
  const AskedQuestion asked = own_question(msg, name);

  auto r = abox::dns::filter_upstream_answer(msg, asked, policy, fuzz_host_addresses());
  if (!r.ok()) {
    if (abox::dns::describe(r.error()).empty()) __builtin_trap();
    return 0;
  }
  const FilteredAnswer& a = *r;
  for (const auto& x : a.addresses) {
    const auto v = policy.check_address(x.address, fuzz_host_addresses());
    if (v.refused()) __builtin_trap();
    if (x.lifted != (v.lifted_by != nullptr)) __builtin_trap();
    if (!ttl_ok(x.ttl, policy)) __builtin_trap();
  }
  for (const auto& x : a.rebinding) {
    if (!policy.check_address(x.address, fuzz_host_addresses()).refused() || x.range == nullptr ||
        x.owner.empty())
      __builtin_trap();
    // An address of this host is reported as such, and nothing else is.
    if ((x.range == &abox::policy::HostAddresses::range()) != fuzz_host_addresses().contains(x.address))
      __builtin_trap();
  }
  if (!ttl_ok(a.cache_ttl, policy)) __builtin_trap();
  check_wire(a, policy);
  return 0;
}
