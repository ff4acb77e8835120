// The upstream answer filter: what an upstream resolver says is checked and
// cut down before the guest sees it or the AnswerTable learns from it.
//
// Parsed by our own code, every read bounds-checked (dns/name.h for names,
// dns/rdata.h for which RDATA is read and how; see answer_filter.cc for the
// limits). For an answer to the question (name, type) the gate asked:
//   - it must be a response with our ID and exactly our question (name
//     compared case-insensitively), else it is not ours and is ignored;
//   - in the answer section, the CNAME chain from the asked name is followed
//     (bounded, loops cut); A and AAAA records owned by a name on that chain
//     are the addresses "answered for" the asked name. Each address in a
//     reserved range, or of this host (policy::Policy::check_address with
//     `host`), is removed and reported as a rebinding attempt; an address
//     lifted by [unsafe] is kept and reported as an unsafe use;
//   - A/AAAA records owned by names off the chain, and every A/AAAA in the
//     authority and additional sections (glue), are removed: the gate only
//     vouches for addresses of the name that was asked;
//   - HTTPS and SVCB records (address hints, ECH keys) are removed from every
//     section, as are the RRSIGs covering anything removed;
//   - every remaining TTL is clamped to [min_ttl, max_ttl] so the guest never
//     caches an answer longer than the gate remembers it.
// The result is re-encoded (with compression) for the guest; its ID is 0 and
// is patched per guest by the caller. An upstream OPT becomes ours: UDP size
// kMaxAdvertisedUdpSize, DO and the extended RCODE kept, no options.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "policy/policy.h"

namespace abox::dns {

// What the gate asked upstream.
struct AskedQuestion {
  std::uint16_t id = 0;
  std::span<const std::uint8_t> qname_wire;  // uncompressed, ends with the root label
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;
};

struct AnsweredAddress {
  policy::IpAddress address;
  std::uint32_t ttl = 0;  // seconds, already clamped
  bool lifted = false;    // reserved but lifted by [unsafe]: log every use
};

struct RemovedAddress {
  policy::IpAddress address;
  std::string owner;  // the record's owner name, presentation form
  const policy::ReservedRange* range = nullptr;
};

struct FilteredAnswer {
  std::uint8_t rcode = 0;
  bool truncated = false;                  // upstream set TC: ask again over TCP
  std::vector<std::uint8_t> wire;          // for the guest; ID 0
  std::vector<AnsweredAddress> addresses;  // answered for the asked name
  std::vector<RemovedAddress> rebinding;   // reserved addresses removed
  std::uint32_t stripped_records = 0;      // HTTPS/SVCB/glue/off-chain/RRSIG removed
  // How long the whole answer may be served from cache: the smallest clamped
  // TTL of what was kept; for NXDOMAIN and NODATA the SOA's negative TTL
  // (RFC 2308), clamped; min_ttl when nothing says.
  std::uint32_t cache_ttl = 0;
};

enum class FilterError : std::uint8_t {
  unparsable,         // not a well-formed message (names, counts, RDATA shapes)
  not_a_response,     // QR bit clear
  id_mismatch,        // not the ID we sent
  question_mismatch,  // not exactly our question
  too_large,          // re-encoded answer over 65535 bytes
};
std::string_view describe(FilterError e);

// `host`: the addresses of the host the gate runs on (policy/host_addresses.h).
base::Result<FilteredAnswer, FilterError> filter_upstream_answer(std::span<const std::uint8_t> msg,
                                                                 const AskedQuestion& asked,
                                                                 const policy::Policy& policy,
                                                                 const policy::HostAddresses& host);

}  // namespace abox::dns
