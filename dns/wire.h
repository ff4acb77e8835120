// DNS wire format on the guest side: parsing one query, building the small
// answers the gate writes itself (errors, truncation), and patching cached
// answers. Sans-I/O; every read goes through base::ByteReader.
//
// What parse_query() accepts (RFC 1035 section 4.1, RFC 6891):
//   - a header with QR = 0 and exactly one question;
//   - no answer or authority records; at most one additional record, which
//     must be an OPT (EDNS) with owner "." (its options are skipped, bounded);
//   - a question name of at most 253 bytes (presentation form, without the
//     final dot) and labels of at most 63 bytes, reached through at most 16
//     compression pointers that each point strictly backwards.
// Anything else is a QueryError. A name with bytes outside [A-Za-z0-9_-] in a
// label parses (it is well-formed DNS) but has no canonical form: the gate
// refuses it as not allowed (see Query::canonical_ok).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "policy/name.h"

namespace abox::dns {

namespace rr_type {
inline constexpr std::uint16_t A = 1;
inline constexpr std::uint16_t NS = 2;
inline constexpr std::uint16_t CNAME = 5;
inline constexpr std::uint16_t SOA = 6;
inline constexpr std::uint16_t PTR = 12;
inline constexpr std::uint16_t MX = 15;
inline constexpr std::uint16_t TXT = 16;
inline constexpr std::uint16_t AAAA = 28;
inline constexpr std::uint16_t SRV = 33;
inline constexpr std::uint16_t DNAME = 39;
inline constexpr std::uint16_t OPT = 41;
inline constexpr std::uint16_t RRSIG = 46;
inline constexpr std::uint16_t SVCB = 64;
inline constexpr std::uint16_t HTTPS = 65;
inline constexpr std::uint16_t IXFR = 251;
inline constexpr std::uint16_t AXFR = 252;
inline constexpr std::uint16_t ANY = 255;
}  // namespace rr_type

namespace rcode {
inline constexpr std::uint8_t NOERROR = 0;
inline constexpr std::uint8_t FORMERR = 1;
inline constexpr std::uint8_t SERVFAIL = 2;
inline constexpr std::uint8_t NXDOMAIN = 3;
inline constexpr std::uint8_t NOTIMP = 4;
inline constexpr std::uint8_t REFUSED = 5;
}  // namespace rcode

inline constexpr std::uint16_t kClassIN = 1;
inline constexpr std::size_t kHeaderSize = 12;
inline constexpr std::uint16_t kPlainUdpSize = 512;           // without EDNS
inline constexpr std::uint16_t kMaxAdvertisedUdpSize = 4096;  // we never send more in one datagram
inline constexpr std::size_t kMaxMessageSize = 65535;

enum class QueryError : std::uint8_t {
  too_short,           // fewer than 12 bytes, or a section runs past the end
  not_a_query,         // QR bit set: a response sent to the gate
  question_count,      // QDCOUNT != 1
  unexpected_records,  // ANCOUNT or NSCOUNT != 0, or ARCOUNT > 1
  bad_name,            // label over 63, name over 253, bad label type
  compression_loop,    // a pointer that does not point strictly backwards, or too many
  bad_additional,      // the additional record is not a well-formed OPT for "."
  trailing_bytes,      // bytes after the last record
};
std::string_view describe(QueryError e);

struct Query {
  std::uint16_t id = 0;
  std::uint16_t flags = 0;  // the header's second 16 bits, as received
  std::uint8_t opcode = 0;  // 0 = QUERY
  bool recursion_desired = false;
  bool checking_disabled = false;

  // The question name in wire form, uncompressed, as the guest wrote it
  // (case preserved), ending with the root label.
  std::array<std::uint8_t, 255> qname_wire{};
  std::uint8_t qname_wire_len = 0;
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;

  // The name in canonical form (policy/name.h), when it has one.
  bool canonical_ok = false;
  policy::CanonicalName name;  // valid only when canonical_ok

  bool has_edns = false;
  std::uint16_t edns_udp_size = 0;  // as advertised (0 when no EDNS)
  bool dnssec_ok = false;           // the DO bit
  std::uint8_t edns_version = 0;

  std::span<const std::uint8_t> qname() const { return {qname_wire.data(), qname_wire_len}; }
  // The largest UDP answer this guest accepts: 512 without EDNS, else its
  // advertised size clamped to 512..4096.
  std::uint16_t udp_limit() const;
};

// Parses a guest's query. The header's ID is readable from the bytes even
// when this fails (see peek_id) so that a FORMERR can be sent back.
base::Result<Query, QueryError> parse_query(std::span<const std::uint8_t> msg);

// The first two bytes as an ID, when present.
std::optional<std::uint16_t> peek_id(std::span<const std::uint8_t> msg);

// Appends an answer with no records to `out` (cleared first): the query's ID,
// opcode, RD and CD, QR and RA set, the given rcode, the question echoed, and
// an OPT record when the query had one. Used for REFUSED, NXDOMAIN, SERVFAIL,
// NOTIMP, and NOERROR/NODATA.
void build_empty_answer(const Query& q, std::uint8_t rcode, std::vector<std::uint8_t>& out);

// A FORMERR for bytes that did not parse: header only, the ID echoed when
// there was one. Returns false (out empty) when there is not even an ID: such
// input is dropped.
bool build_formerr(std::span<const std::uint8_t> msg, std::vector<std::uint8_t>& out);

// Builds the query the gate sends upstream for q: a fresh ID, RD set, the
// question as the guest wrote it lowercased, and our own OPT advertising
// kMaxAdvertisedUdpSize with the DO bit copied. Never copies the guest's
// other flags or options.
void build_upstream_query(const Query& q, std::uint16_t id, std::vector<std::uint8_t>& out);

// For a UDP answer larger than the guest accepts: keeps header and question
// (and the OPT, when the query had EDNS), sets TC, drops every record.
// `answer` is a well-formed answer to q built by the gate.
void truncate_for_udp(const Query& q, std::vector<std::uint8_t>& answer);

}  // namespace abox::dns

namespace abox::dns {

// Offsets of the TTL field of every record in the answer, authority and
// additional sections of a well-formed message (OPT records excluded: their
// "TTL" holds EDNS flags). Returns false, `out` unspecified, when the message
// does not walk cleanly. The response cache uses this to age cached answers
// without parsing them again.
bool find_ttl_offsets(std::span<const std::uint8_t> msg, std::vector<std::uint16_t>& out);

// Removes the OPT record from an answer for a guest that asked without EDNS
// (RFC 6891 section 7: no OPT in a response to a query without one). Only an
// OPT that is the last record is removed, which is where the gate's answers
// carry it; anything else is left as it is.
void drop_opt_record(std::vector<std::uint8_t>& answer);

}  // namespace abox::dns
