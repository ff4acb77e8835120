// DNS wire format on the guest side. How this works:
//
// parse_query() runs on every datagram (or TCP message) the guest sends to
// the gate, so it reads once, front to back, through one base::ByteReader and
// fills a fixed-size Query: no allocation. Its checks, in order: a 12-byte
// header; QR clear; QDCOUNT 1; ANCOUNT and NSCOUNT 0 and ARCOUNT at most 1;
// the question name; QTYPE and QCLASS; the optional OPT (owner ".", type 41,
// options that exactly fill RDLENGTH); and no byte after it. The first
// failure is the one reported.
//
// Names are read by dns/name.h (shared with the answer filter): labels of
// 1..63 bytes, at most 255 bytes in wire form (253 in presentation form),
// label types 0x40 and 0x80 refused, compression pointers only strictly
// backwards and at most 16 per name. In a query the name starts right after
// the header, so any pointer in it is refused.
//
// A name's canonical form is computed from its presentation text, built in a
// stack buffer from the name read. A label holding a byte outside
// [A-Za-z0-9_-] (a '.', a NUL, a space, a byte >= 0x80) is well-formed DNS
// but has no canonical form: the text "a.b" could not tell the label "a.b"
// apart from the labels "a" and "b", so such names are never handed to
// CanonicalName.
//
// The builders write into the caller's vector: clear, reserve the exact
// size once, append. find_ttl_offsets() walks every record of a message with
// the same name rules, for the response cache.

#include "dns/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/byte_reader.h"
#include "dns/name.h"

namespace abox::dns {

using base::ByteReader;
using base::Err;

namespace {

// Header flag bits (RFC 1035 section 4.1.1, RFC 4035 section 3.2).
constexpr std::uint16_t kFlagQR = 0x8000;
constexpr std::uint16_t kFlagTC = 0x0200;
constexpr std::uint16_t kFlagRD = 0x0100;
constexpr std::uint16_t kFlagRA = 0x0080;
constexpr std::uint16_t kFlagCD = 0x0010;
constexpr int kOpcodeShift = 11;
constexpr std::uint16_t kOpcodeMask = 0x0F;
constexpr std::uint16_t kRcodeMask = 0x000F;

constexpr std::size_t kFlagsOffset = 2;  // after the ID

// The DO bit in an OPT record's TTL field (RFC 3225).
constexpr std::uint32_t kEdnsDO = 0x8000;
// Root owner, TYPE, CLASS, TTL, RDLENGTH: an OPT with no options.
constexpr std::size_t kEmptyOptSize = 11;
constexpr std::size_t kQuestionTail = 4;  // QTYPE, QCLASS

// Bytes a label may hold for the name to have a canonical form; the same set
// policy/name.cc accepts, minus the dot (which would split the label).
constexpr std::array<bool, 256> make_hostname_table() {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
  t['-'] = true;
  t['_'] = true;
  return t;
}
constexpr std::array<bool, 256> kHostnameByte = make_hostname_table();

[[noreturn]] void broken_invariant(const char* what) {
  (void)std::fprintf(stderr, "abox: dns wire: %s\n", what);  // about to abort: nothing to do if it fails
  std::abort();
}

// What a name read error means for a query.
QueryError query_error(NameError e) {
  switch (e) {
    case NameError::truncated:
      return QueryError::too_short;
    case NameError::bad_label:
      return QueryError::bad_name;
    case NameError::bad_pointer:
      return QueryError::compression_loop;
  }
  return QueryError::bad_name;
}

// The presentation text of a name without the final dot, into `text`
// (at most 253 bytes: a wire name of at most 255), and whether every byte is
// a hostname byte (only then is the text meaningful).
bool hostname_text(const WireName& name, std::array<char, policy::kMaxNameLength>& text,
                   std::size_t& text_len) {
  bool hostname_bytes = true;
  text_len = 0;
  std::size_t at = 0;
  while (at < name.size && name.bytes[at] != 0) {
    const std::size_t length = name.bytes[at];
    if (text_len != 0) text[text_len++] = '.';
    for (std::size_t i = at + 1; i <= at + length; ++i) {
      hostname_bytes = hostname_bytes && kHostnameByte[name.bytes[i]];
      text[text_len++] = static_cast<char>(name.bytes[i]);
    }
    at += 1 + length;
  }
  return hostname_bytes;
}

// The OPT record after the question: the reader is at its owner name. Its
// options are walked (each must fit, together they must fill RDLENGTH
// exactly) but not kept: the gate forwards none of them.
std::optional<QueryError> read_opt(ByteReader& r, Query& q) {
  auto owner = r.u8();
  if (!owner) return QueryError::too_short;
  if (*owner != 0) return QueryError::bad_additional;  // not ".", or compressed
  auto type = r.u16be();
  auto udp_size = r.u16be();
  auto ttl = r.u32be();
  auto rdlength = r.u16be();
  if (!type || !udp_size || !ttl || !rdlength) return QueryError::too_short;
  if (*type != rr_type::OPT) return QueryError::bad_additional;
  auto rdata = r.bytes(*rdlength);
  if (!rdata) return QueryError::too_short;
  ByteReader options(*rdata);
  while (!options.empty()) {
    auto code = options.u16be();
    auto length = options.u16be();
    if (!code || !length || !options.skip(*length)) return QueryError::bad_additional;
  }
  q.has_edns = true;
  q.edns_udp_size = *udp_size;
  q.edns_version = static_cast<std::uint8_t>(*ttl >> 16);
  q.dnssec_ok = (*ttl & kEdnsDO) != 0;
  return std::nullopt;
}

// Appending to a vector whose capacity the caller reserved.
void put_u16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  put_u16(out, static_cast<std::uint16_t>(v >> 16));
  put_u16(out, static_cast<std::uint16_t>(v));
}
void put_header(std::vector<std::uint8_t>& out, std::uint16_t id, std::uint16_t flags,
                std::uint16_t arcount) {
  put_u16(out, id);
  put_u16(out, flags);
  put_u16(out, 1);  // QDCOUNT
  put_u16(out, 0);  // ANCOUNT
  put_u16(out, 0);  // NSCOUNT
  put_u16(out, arcount);
}
void put_question(std::vector<std::uint8_t>& out, const Query& q) {
  const auto name = q.qname();
  out.insert(out.end(), name.begin(), name.end());
  put_u16(out, q.qtype);
  put_u16(out, q.qclass);
}
void put_opt(std::vector<std::uint8_t>& out, std::uint32_t ttl) {
  out.push_back(0);  // owner "."
  put_u16(out, rr_type::OPT);
  put_u16(out, kMaxAdvertisedUdpSize);  // CLASS: the largest UDP payload we take
  put_u32(out, ttl);
  put_u16(out, 0);  // RDLENGTH: no options
}
std::uint32_t opt_ttl(std::uint8_t extended_rcode, bool dnssec_ok) {
  return (std::uint32_t{extended_rcode} << 24) | (dnssec_ok ? kEdnsDO : 0);
}

// Walks a whole message: header, questions, then every record of the
// answer, authority and additional sections, calling on_record(type,
// ttl_offset) for each. False when a count, name or RDLENGTH runs past the
// end, a name breaks the rules, or bytes are left over.
template <class OnRecord>
bool walk_message(std::span<const std::uint8_t> msg, OnRecord&& on_record) {
  // Offsets are reported as 16 bits; no DNS message is longer anyway.
  if (msg.size() > kMaxMessageSize) return false;
  ByteReader r(msg);
  if (!r.skip(4)) return false;  // ID, flags
  auto qdcount = r.u16be();
  auto ancount = r.u16be();
  auto nscount = r.u16be();
  auto arcount = r.u16be();
  if (!qdcount || !ancount || !nscount || !arcount) return false;
  for (std::uint16_t i = 0; i < *qdcount; ++i) {
    if (read_name(r, nullptr) || !r.skip(kQuestionTail)) return false;
  }
  // Each record takes at least 11 bytes, so a hostile count stops at the end
  // of the message after at most size/11 rounds.
  const std::size_t records = std::size_t{*ancount} + *nscount + *arcount;
  for (std::size_t i = 0; i < records; ++i) {
    const std::size_t start = r.position();
    if (read_name(r, nullptr)) return false;
    auto type = r.u16be();
    if (!type || !r.skip(2)) return false;  // CLASS
    const std::size_t ttl_offset = r.position();
    if (!r.skip(4)) return false;
    auto rdlength = r.u16be();
    if (!rdlength || !r.skip(*rdlength)) return false;
    on_record(*type, ttl_offset, start, r.position());
  }
  return r.empty();
}

}  // namespace

std::string_view describe(QueryError e) {
  switch (e) {
    case QueryError::too_short:
      return "the message is shorter than its header or a section runs past the end";
    case QueryError::not_a_query:
      return "the QR bit is set: a response, not a query";
    case QueryError::question_count:
      return "the message does not have exactly one question";
    case QueryError::unexpected_records:
      return "a query has answer or authority records, or more than one additional record";
    case QueryError::bad_name:
      return "the question name has a label over 63 bytes, is over 253 bytes, or has a bad label type";
    case QueryError::compression_loop:
      return "a compression pointer does not point strictly backwards, or there are more than 16";
    case QueryError::bad_additional:
      return "the additional record is not a well-formed OPT record for the root";
    case QueryError::trailing_bytes:
      return "there are bytes after the last record";
  }
  // Only reachable through a cast from an out-of-range integer.
  return "the query is malformed";
}

std::uint16_t Query::udp_limit() const {
  if (!has_edns) return kPlainUdpSize;
  return std::clamp(edns_udp_size, kPlainUdpSize, kMaxAdvertisedUdpSize);
}

base::Result<Query, QueryError> parse_query(std::span<const std::uint8_t> msg) {
  ByteReader r(msg);
  auto id = r.u16be();
  auto flags = r.u16be();
  auto qdcount = r.u16be();
  auto ancount = r.u16be();
  auto nscount = r.u16be();
  auto arcount = r.u16be();
  if (!id || !flags || !qdcount || !ancount || !nscount || !arcount) return Err{QueryError::too_short};
  if ((*flags & kFlagQR) != 0) return Err{QueryError::not_a_query};
  if (*qdcount != 1) return Err{QueryError::question_count};
  if (*ancount != 0 || *nscount != 0 || *arcount > 1) return Err{QueryError::unexpected_records};

  Query q;
  q.id = *id;
  q.flags = *flags;
  q.opcode = static_cast<std::uint8_t>((*flags >> kOpcodeShift) & kOpcodeMask);
  q.recursion_desired = (*flags & kFlagRD) != 0;
  q.checking_disabled = (*flags & kFlagCD) != 0;

  WireName name;
  if (auto e = read_name(r, &name)) return Err{query_error(*e)};
  auto qtype = r.u16be();
  auto qclass = r.u16be();
  if (!qtype || !qclass) return Err{QueryError::too_short};
  q.qtype = *qtype;
  q.qclass = *qclass;
  std::copy(name.bytes.begin(), name.bytes.begin() + name.size, q.qname_wire.begin());
  q.qname_wire_len = name.size;  // <= 255 by read_name

  if (*arcount == 1) {
    if (auto e = read_opt(r, q)) return Err{*e};
  }
  if (!r.empty()) return Err{QueryError::trailing_bytes};

  // Only names of hostname bytes reach CanonicalName (see the file comment).
  // It can still refuse one: the root name has empty text.
  std::array<char, policy::kMaxNameLength> text{};
  std::size_t text_len = 0;
  if (hostname_text(name, text, text_len)) {
    auto canonical = policy::CanonicalName::from(std::string_view(text.data(), text_len));
    if (canonical) {
      q.canonical_ok = true;
      q.name = *canonical;
    }
  }
  return q;
}

std::optional<std::uint16_t> peek_id(std::span<const std::uint8_t> msg) {
  ByteReader r(msg);
  return r.u16be();
}

void build_empty_answer(const Query& q, std::uint8_t rcode, std::vector<std::uint8_t>& out) {
  // RCODEs above 15 live partly in the OPT record (RFC 6891 section 6.1.3).
  if (rcode > kRcodeMask && !q.has_edns) broken_invariant("extended RCODE for a query without EDNS");
  out.clear();
  out.reserve(kHeaderSize + q.qname_wire_len + kQuestionTail + kEmptyOptSize);
  std::uint16_t flags =
      kFlagQR | kFlagRA | static_cast<std::uint16_t>(q.opcode << kOpcodeShift) | (rcode & kRcodeMask);
  if (q.recursion_desired) flags |= kFlagRD;
  if (q.checking_disabled) flags |= kFlagCD;
  put_header(out, q.id, flags, q.has_edns ? 1 : 0);
  put_question(out, q);
  // The DO bit is echoed (RFC 3225 section 3).
  if (q.has_edns) put_opt(out, opt_ttl(static_cast<std::uint8_t>(rcode >> 4), q.dnssec_ok));
}

bool build_formerr(std::span<const std::uint8_t> msg, std::vector<std::uint8_t>& out) {
  out.clear();
  auto id = peek_id(msg);
  if (!id) return false;
  out.reserve(kHeaderSize);
  // Nothing past the ID is trusted, not even the opcode: the answer is the
  // bare header that says "this did not parse", with every count 0.
  put_u16(out, *id);
  put_u16(out, kFlagQR | rcode::FORMERR);
  put_u32(out, 0);  // QDCOUNT, ANCOUNT
  put_u32(out, 0);  // NSCOUNT, ARCOUNT
  return true;
}

void build_upstream_query(const Query& q, std::uint16_t id, std::vector<std::uint8_t>& out) {
  out.clear();
  out.reserve(kHeaderSize + q.qname_wire_len + kQuestionTail + kEmptyOptSize);
  // Only RD: the guest's opcode, CD, AD and Z bits are its own business and
  // must not change what upstream does (nor what the cache keys on).
  put_header(out, id, kFlagRD, 1);
  // Lower-cased label by label, so a length byte is never mistaken for a
  // letter (it cannot be one today: lengths stop at 63, 'A' is 65).
  const auto name = q.qname();
  std::size_t next_length = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    std::uint8_t byte = name[i];
    if (i == next_length) {
      next_length = i + 1 + byte;
    } else if (byte >= 'A' && byte <= 'Z') {
      byte = static_cast<std::uint8_t>(byte - 'A' + 'a');
    }
    out.push_back(byte);
  }
  put_u16(out, q.qtype);
  put_u16(out, q.qclass);
  put_opt(out, opt_ttl(0, q.dnssec_ok));
}

void truncate_for_udp(const Query& q, std::vector<std::uint8_t>& answer) {
  if (answer.size() < kHeaderSize) broken_invariant("truncate_for_udp on an answer without a header");
  // Keep the answer's OPT TTL (extended RCODE, DO) when it has one; the
  // gate built it, so it walks, but fall back to ours rather than trust that.
  std::uint32_t ttl = opt_ttl(0, q.dnssec_ok);
  if (q.has_edns) {
    std::optional<std::size_t> opt_ttl_offset;
    if (walk_message(answer,
                     [&](std::uint16_t type, std::size_t ttl_offset, std::size_t, std::size_t) {
                       if (type == rr_type::OPT) opt_ttl_offset = ttl_offset;
                     }) &&
        opt_ttl_offset) {
      ByteReader r(answer);
      if (r.seek(*opt_ttl_offset)) ttl = r.u32be().value_or(ttl);
    }
  }
  ByteReader r(answer);
  auto flags = r.skip(kFlagsOffset) ? r.u16be() : std::nullopt;
  // The new message is at most 12 + 255 + 4 + 11 bytes, shorter than any
  // answer worth truncating (the guest takes at least 512), so the vector
  // shrinks and never reallocates. The ID and flags stay, with TC set.
  answer.resize(kFlagsOffset);
  put_u16(answer, static_cast<std::uint16_t>(flags.value_or(0) | kFlagTC));
  put_u16(answer, 1);  // QDCOUNT
  put_u16(answer, 0);  // ANCOUNT
  put_u16(answer, 0);  // NSCOUNT
  put_u16(answer, q.has_edns ? 1 : 0);
  put_question(answer, q);
  if (q.has_edns) put_opt(answer, ttl);
}

bool find_ttl_offsets(std::span<const std::uint8_t> msg, std::vector<std::uint16_t>& out) {
  out.clear();
  return walk_message(msg, [&](std::uint16_t type, std::size_t ttl_offset, std::size_t, std::size_t) {
    // An OPT's TTL field holds the extended RCODE and flags, not a TTL.
    if (type != rr_type::OPT) out.push_back(static_cast<std::uint16_t>(ttl_offset));
  });
}

void drop_opt_record(std::vector<std::uint8_t>& answer) {
  std::size_t start = 0;
  std::size_t end = 0;
  bool found = false;
  bool ok = walk_message(answer, [&](std::uint16_t type, std::size_t, std::size_t s, std::size_t e) {
    if (type == rr_type::OPT) {
      found = true;
      start = s;
      end = e;
    }
  });
  // Only an OPT that ends the message is cut: no later name can point past it.
  if (!ok || !found || end != answer.size() || answer.size() < kHeaderSize) return;
  answer.resize(start);
  std::uint16_t arcount = static_cast<std::uint16_t>((answer[10] << 8) | answer[11]);
  if (arcount == 0) return;
  --arcount;
  answer[10] = static_cast<std::uint8_t>(arcount >> 8);
  answer[11] = static_cast<std::uint8_t>(arcount & 0xFF);
}

}  // namespace abox::dns
