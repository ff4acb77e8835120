// The upstream answer filter (see answer_filter.h for the rules).
//
// How this works. One call takes one upstream message and either refuses it
// or returns the cut-down answer. It owns nothing between calls. Limits: the
// message is at most 65535 bytes, and every record takes at least 11 of
// them, so no count can make it do more than ~6000 records' work; what it
// allocates is the records' index (40 bytes each), their owner names (at
// most 255 bytes each, ~1.5 MiB for the worst 64 KiB message), and the
// writer's compression table (a few dozen bytes per name written).
//
//   1. Header, read with base::ByteReader: QR set, opcode QUERY, our ID, one
//      question. These are cheap, so a message that is not ours costs no
//      parsing.
//   2. Records, each read in place: its owner through dns/name.h (labels of
//      at most 63 bytes, names of at most 255, pointers only strictly
//      backwards and at most 16 per name, no extended label types), its fixed
//      fields, and its RDATA checked against its type's layout (dns/rdata.h:
//      the fields must fill RDLENGTH exactly, so nothing hides after them;
//      unknown types are opaque bytes). Only the owner is copied out; RDATA
//      stays in the message and is read again when written. The OPT record
//      is read here (at most one, owner ".", additional section only, as RFC
//      6891 requires) and only its header fields are kept.
//   3. Filtering. The CNAME/DNAME chain from the question name is followed in
//      the answer section (at most kMaxChainHops steps, a name seen twice
//      ends it). Every record gets a fate: kept, removed as a rebinding
//      attempt (reported), or stripped (counted). RRSIGs are decided last,
//      because they go with the RRset they cover: one whose RRset lost a
//      member at that owner and in that section is stripped with it.
//   4. Encoding. A MessageWriter writes the header (ID 0, the counts of what
//      was kept), the question, the kept records with TTLs clamped (owner
//      names compressed, RDATA names as dns/rdata.h says), and, when upstream
//      sent one, an OPT of our own: our UDP size, the DO bit, no options.
//      Past 65535 bytes the answer is refused as too_large.
#include "dns/answer_filter.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/byte_reader.h"
#include "dns/message_writer.h"
#include "dns/name.h"
#include "dns/rdata.h"
#include "dns/wire.h"

namespace abox::dns {

std::string_view describe(FilterError e) {
  switch (e) {
    case FilterError::unparsable:
      return "the upstream answer is not a well-formed DNS message";
    case FilterError::not_a_response:
      return "the upstream message is not a response to a query";
    case FilterError::id_mismatch:
      return "the upstream answer carries an ID we did not send";
    case FilterError::question_mismatch:
      return "the upstream answer is not for the question we asked";
    case FilterError::too_large:
      return "the filtered answer does not fit in one DNS message";
  }
  return "unknown answer filter error";
}

namespace {

// Bounds on upstream input; see the file comment for why each exists.
constexpr int kMaxChainHops = 16;
// RFC 2181 section 8: a TTL with the top bit set is treated as zero.
constexpr std::uint32_t kMaxSaneTtl = 0x7FFF'FFFF;
constexpr std::uint16_t kEdnsDoBit = 0x8000;
constexpr std::size_t kMinRecordSize = 11;  // root owner, TYPE, CLASS, TTL, RDLENGTH
// Header flag bits, by byte (RFC 1035 section 4.1.1, RFC 4035 section 3.2).
constexpr std::uint8_t kFlagsHiQR = 0x80;
constexpr std::uint8_t kFlagsHiAA = 0x04;
constexpr std::uint8_t kFlagsHiTC = 0x02;
constexpr std::uint8_t kFlagsHiRD = 0x01;
constexpr std::uint8_t kFlagsLoRA = 0x80;
constexpr std::uint8_t kFlagsLoAD = 0x20;
constexpr std::uint8_t kFlagsLoCD = 0x10;

// Sections in the order they appear; values are also keys of StrippedSet.
enum class Section : std::uint8_t { answer = 0, authority = 1, additional = 2 };

// Offset in `name` at which `ancestor` starts as a whole-label suffix, when
// `name` is strictly below it (RFC 6672 DNAME applies only there).
std::optional<std::size_t> suffix_offset(NameView name, NameView ancestor) {
  if (ancestor.size() >= name.size()) return std::nullopt;
  std::size_t at = 0;
  while (at < name.size() && name[at] != 0) {
    at += 1 + std::size_t{name[at]};
    if (at >= name.size()) return std::nullopt;
    if (name.size() - at == ancestor.size()) {
      if (names_equal(name.subspan(at), ancestor)) return at;
      return std::nullopt;
    }
    if (name.size() - at < ancestor.size()) return std::nullopt;
  }
  return std::nullopt;
}

using Name = std::vector<std::uint8_t>;

// The asked name followed by each CNAME/DNAME target, in order.
class Chain {
 public:
  explicit Chain(NameView start) { names_.emplace_back(start.begin(), start.end()); }
  bool contains(NameView n) const {
    return std::any_of(names_.begin(), names_.end(), [&](const Name& c) { return names_equal(c, n); });
  }
  // Is some chain name strictly below `n`? (a DNAME owned by n governs it)
  bool has_descendant_of(NameView n) const {
    return std::any_of(names_.begin(), names_.end(),
                       [&](const Name& c) { return suffix_offset(c, n).has_value(); });
  }
  const Name& last() const { return names_.back(); }
  void push(Name n) { names_.push_back(std::move(n)); }

 private:
  std::vector<Name> names_;
};

// ---------------------------------------------------------------------------
// Parsing.

struct Header {
  std::uint16_t id = 0;
  std::uint8_t flags_hi = 0;  // QR opcode AA TC RD
  std::uint8_t flags_lo = 0;  // RA Z AD CD RCODE
  std::uint16_t qdcount = 0, ancount = 0, nscount = 0, arcount = 0;

  bool qr() const { return (flags_hi & 0x80) != 0; }
  std::uint8_t opcode() const { return static_cast<std::uint8_t>((flags_hi >> 3) & 0x0F); }
  std::uint8_t rcode() const { return flags_lo & 0x0F; }
};

struct Opt {
  std::uint16_t udp_size = 0;
  std::uint8_t extended_rcode = 0;
  std::uint8_t version = 0;
  std::uint16_t flags = 0;
};

// A record as read: fixed fields, where its owner was copied to, where its
// RDATA is in the message.
struct Record {
  std::uint32_t owner_at = 0;  // into Upstream::names
  std::uint8_t owner_size = 0;
  std::uint16_t type = 0;
  std::uint16_t rclass = 0;
  std::uint32_t ttl = 0;
  RdataRef rdata;
};

struct Upstream {
  Header header;
  WireName qname;  // as upstream wrote it
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;
  std::array<std::vector<Record>, 3> sections;  // indexed by Section
  std::optional<Opt> opt;
  std::vector<std::uint8_t> names;  // every record's owner, uncompressed, back to back

  NameView owner(const Record& rr) const { return NameView(names).subspan(rr.owner_at, rr.owner_size); }
};

enum class ParseOutcome : std::uint8_t { ok, unparsable, not_a_response, id_mismatch, question_mismatch };

// Reads the header and checks it is an answer to our query before anything
// else is decoded.
ParseOutcome read_header(base::ByteReader& r, const AskedQuestion& asked, Header& h) {
  auto id = r.u16be();
  auto hi = r.u8();
  auto lo = r.u8();
  auto qd = r.u16be(), an = r.u16be(), ns = r.u16be(), ar = r.u16be();
  if (!id || !hi || !lo || !qd || !an || !ns || !ar) return ParseOutcome::unparsable;
  h = Header{*id, *hi, *lo, *qd, *an, *ns, *ar};
  if (!h.qr()) return ParseOutcome::not_a_response;
  // Our query is a QUERY; a NOTIFY or UPDATE "response" cannot answer it.
  if (h.opcode() != 0) return ParseOutcome::not_a_response;
  if (h.id != asked.id) return ParseOutcome::id_mismatch;
  if (h.qdcount != 1) return ParseOutcome::question_mismatch;
  return ParseOutcome::ok;
}

// Reads one record at the reader's cursor and moves past it: its owner
// (copied to up.names), fixed fields, and RDATA, which must lie inside the
// message and have its type's shape (rdata_well_formed).
std::optional<Record> read_record(std::span<const std::uint8_t> msg, base::ByteReader& r, Upstream& up) {
  WireName owner;
  if (read_name(r, &owner)) return std::nullopt;
  Record rr;
  auto type = r.u16be();
  auto rclass = r.u16be();
  auto ttl = r.u32be();
  auto rdlength = r.u16be();
  if (!type || !rclass || !ttl || !rdlength) return std::nullopt;
  rr.type = *type;
  rr.rclass = *rclass;
  rr.ttl = *ttl;
  rr.rdata = RdataRef{*type, r.position(), *rdlength};
  if (!r.skip(*rdlength)) return std::nullopt;
  if (!rdata_well_formed(msg, rr.rdata)) return std::nullopt;
  rr.owner_at = static_cast<std::uint32_t>(up.names.size());
  rr.owner_size = owner.size;
  up.names.insert(up.names.end(), owner.bytes.begin(), owner.bytes.begin() + owner.size);
  return rr;
}

// The OPT record's header fields (RFC 6891 section 6.1.3); its options are
// hop-by-hop (cookies, padding, client subnet) and are not passed on.
Opt read_opt(const Record& rr) {
  return Opt{rr.rclass, static_cast<std::uint8_t>(rr.ttl >> 24),
             static_cast<std::uint8_t>((rr.ttl >> 16) & 0xFF), static_cast<std::uint16_t>(rr.ttl & 0xFFFF)};
}

ParseOutcome parse_upstream(std::span<const std::uint8_t> msg, const AskedQuestion& asked, Upstream& up) {
  if (msg.size() < kHeaderSize || msg.size() > kMaxMessageSize) return ParseOutcome::unparsable;
  base::ByteReader r(msg);
  if (auto o = read_header(r, asked, up.header); o != ParseOutcome::ok) return o;

  if (read_name(r, &up.qname)) return ParseOutcome::unparsable;
  auto qtype = r.u16be();
  auto qclass = r.u16be();
  if (!qtype || !qclass) return ParseOutcome::unparsable;
  up.qtype = *qtype;
  up.qclass = *qclass;
  if (up.qtype != asked.qtype || up.qclass != asked.qclass || !names_equal(up.qname.view(), asked.qname_wire))
    return ParseOutcome::question_mismatch;

  // Every record takes at least 11 bytes, so a count the message cannot hold
  // fails when the bytes run out; the reservations are bounded the same way.
  const std::size_t most_records = r.remaining() / kMinRecordSize;
  const std::array<std::pair<Section, std::uint16_t>, 3> counts = {{
      {Section::answer, up.header.ancount},
      {Section::authority, up.header.nscount},
      {Section::additional, up.header.arcount},
  }};
  for (const auto& [section, count] : counts) {
    auto& list = up.sections[static_cast<std::size_t>(section)];
    list.reserve(std::min<std::size_t>(count, most_records));
    for (std::uint32_t i = 0; i < count; ++i) {
      std::optional<Record> rr = read_record(msg, r, up);
      if (!rr) return ParseOutcome::unparsable;
      if (rr->type == rr_type::OPT) {
        const bool root_owner = rr->owner_size == 1;
        if (section != Section::additional || up.opt || !root_owner) return ParseOutcome::unparsable;
        up.opt = read_opt(*rr);
        continue;
      }
      list.push_back(*rr);
    }
  }
  // Bytes after the last record are ignored, as every resolver does: they do
  // not reach the guest, which gets our re-encoding.
  return ParseOutcome::ok;
}

// ---------------------------------------------------------------------------
// Filtering.

bool is_service_binding(std::uint16_t type) {
  return type == rr_type::HTTPS || type == rr_type::SVCB;
}

// Meta and question-only types (RFC 6895: 128-255, TSIG and TKEY among them)
// mean nothing to a guest's cache: we never sign, never ask for a transfer.
bool is_meta(std::uint16_t type) {
  return type >= 128 && type <= 255;
}

std::uint32_t clamp_ttl(std::uint32_t raw, const policy::DnsSettings& dns) {
  const std::uint32_t ttl = raw > kMaxSaneTtl ? 0 : raw;
  // Policy validation guarantees min_ttl <= max_ttl; max() last keeps the
  // upper bound even if it did not.
  return std::min(std::max(ttl, dns.min_ttl), dns.max_ttl);
}

// Reads the RDATA bytes of a checked record (they lie inside the message).
std::span<const std::uint8_t> rdata_bytes(std::span<const std::uint8_t> msg, const Record& rr) {
  return msg.subspan(rr.rdata.at, rr.rdata.length);
}

// (section, owner, type) of every record removed, so that RRSIGs over the
// same RRset go too. The key is section and type bytes, then the folded name.
class StrippedSet {
 public:
  void add(Section s, NameView owner, std::uint16_t type) { keys_.insert(key(s, owner, type)); }
  bool contains(Section s, NameView owner, std::uint16_t type) const {
    return keys_.count(key(s, owner, type)) != 0;
  }

 private:
  static std::string key(Section s, NameView owner, std::uint16_t type) {
    std::string k;
    k.reserve(3 + owner.size());
    k.push_back(static_cast<char>(s));
    k.push_back(static_cast<char>(type >> 8));
    k.push_back(static_cast<char>(type & 0xFF));
    for (std::uint8_t c : owner) k.push_back(static_cast<char>(fold_ascii(c)));
    return k;
  }
  std::unordered_set<std::string> keys_;
};

// The type an RRSIG covers: its first two RDATA bytes (the layout guarantees
// all 18 fixed bytes).
std::uint16_t rrsig_covers(std::span<const std::uint8_t> msg, const Record& rr) {
  auto rd = rdata_bytes(msg, rr);
  return static_cast<std::uint16_t>((rd[0] << 8) | rd[1]);
}

// Follows CNAMEs, then DNAMEs, from the question name through the answer
// section. A DNAME step is synthesized (RFC 6672) only when the upstream sent
// no CNAME for that name, as old servers do. A target is read from the
// message only for the record that extends the chain: at most two per hop.
Chain follow_chain(std::span<const std::uint8_t> msg, const Upstream& up) {
  const auto& answer = up.sections[static_cast<std::size_t>(Section::answer)];
  Chain chain(up.qname.view());
  for (int hop = 0; hop < kMaxChainHops; ++hop) {
    const Name& current = chain.last();
    std::optional<Name> next;
    for (const Record& rr : answer) {
      if (rr.type != rr_type::CNAME || rr.rclass != up.qclass) continue;
      if (!names_equal(up.owner(rr), current)) continue;
      if (auto target = rdata_first_name(msg, rr.rdata))
        next.emplace(target->view().begin(), target->view().end());
      break;  // several CNAMEs at one name is malformed: the first one counts
    }
    if (!next) {
      for (const Record& rr : answer) {
        if (rr.type != rr_type::DNAME || rr.rclass != up.qclass) continue;
        auto cut = suffix_offset(current, up.owner(rr));
        if (!cut) continue;
        const std::optional<WireName> read = rdata_first_name(msg, rr.rdata);
        if (!read) continue;  // cannot happen: the record's RDATA was checked
        NameView target = read->view();
        if (*cut + target.size() > kMaxWireName) break;  // YXDOMAIN: the chain ends
        Name synthesized(current.begin(), current.begin() + static_cast<std::ptrdiff_t>(*cut));
        synthesized.insert(synthesized.end(), target.begin(), target.end());
        next = std::move(synthesized);
        break;
      }
    }
    if (!next || chain.contains(*next)) break;  // end of chain, or a loop
    chain.push(std::move(*next));
  }
  return chain;
}

enum class Fate : std::uint8_t { keep, strip, rebinding };

struct Filtering {
  std::span<const std::uint8_t> msg;
  const Upstream& up;
  const policy::Policy& egress;
  const policy::HostAddresses& host;
  const Chain& chain;
  FilteredAnswer& out;
  StrippedSet stripped;
  // Index into out.addresses: a 64 KiB answer holds ~4000 address records.
  std::unordered_map<policy::IpAddress, std::size_t, policy::IpAddressHash> address_index;

  // An address record owned by a chain name, in the answer section.
  Fate address(const Record& rr) {
    if (rr.rclass != kClassIN) return Fate::strip;  // a CH "A" is no IPv4 address
    auto rd = rdata_bytes(msg, rr);
    policy::IpAddress ip;
    if (rr.type == rr_type::A && rd.size() == 4) {
      ip = policy::IpAddress::v4_bytes(rd.data());
    } else if (rr.type == rr_type::AAAA && rd.size() == 16) {
      std::array<std::uint8_t, 16> b{};
      std::copy(rd.begin(), rd.end(), b.begin());
      ip = policy::IpAddress::v6(b);
    } else {
      return Fate::strip;  // rdata_well_formed guarantees the sizes; keep the check local
    }
    const policy::AddressVerdict v = egress.check_address(ip, host);
    if (v.refused()) {
      out.rebinding.push_back(RemovedAddress{ip, name_to_text(up.owner(rr)), v.reserved});
      return Fate::rebinding;
    }
    const std::uint32_t ttl = clamp_ttl(rr.ttl, egress.dns());
    // The same address twice (two chain names, or a repeated record) is one
    // answer; keep the longer TTL, as the guest may cache either record.
    auto [at, fresh] = address_index.try_emplace(ip, out.addresses.size());
    if (fresh) {
      out.addresses.push_back(AnsweredAddress{ip, ttl, v.lifted_by != nullptr});
    } else {
      out.addresses[at->second].ttl = std::max(out.addresses[at->second].ttl, ttl);
    }
    return Fate::keep;
  }

  // Everything but RRSIGs (decided afterwards, see rrsig()).
  Fate decide(Section s, const Record& rr) {
    if (is_service_binding(rr.type) || is_meta(rr.type)) return Fate::strip;
    const bool is_address = rr.type == rr_type::A || rr.type == rr_type::AAAA;
    if (s != Section::answer) return is_address ? Fate::strip : Fate::keep;  // no glue

    // The answer section speaks only about the chain: whatever is owned by
    // another name (and in another class) was not asked for.
    if (rr.rclass != up.qclass) return Fate::strip;
    NameView owner = up.owner(rr);
    const bool on_chain = chain.contains(owner);
    if (is_address) return on_chain ? address(rr) : Fate::strip;
    if (rr.type == rr_type::DNAME)
      return on_chain || chain.has_descendant_of(owner) ? Fate::keep : Fate::strip;
    return on_chain ? Fate::keep : Fate::strip;
  }

  Fate rrsig(Section s, const Record& rr) {
    const std::uint16_t covered = rrsig_covers(msg, rr);
    if (is_service_binding(covered)) return Fate::strip;
    NameView owner = up.owner(rr);
    if (s == Section::answer) {
      if (rr.rclass != up.qclass) return Fate::strip;
      const bool governs_chain = covered == rr_type::DNAME && chain.has_descendant_of(owner);
      if (!chain.contains(owner) && !governs_chain) return Fate::strip;
    }
    return stripped.contains(s, owner, covered) ? Fate::strip : Fate::keep;
  }
};

// RFC 2308 section 5: a negative answer lives min(SOA TTL, SOA MINIMUM).
std::optional<std::uint32_t> negative_ttl(std::span<const std::uint8_t> msg,
                                          const std::vector<Record>& authority) {
  std::optional<std::uint32_t> best;
  for (const Record& rr : authority) {
    if (rr.type != rr_type::SOA) continue;
    // The SOA layout ends with five 32-bit fields; MINIMUM is the last. Its
    // RDATA may hold compressed names, but the fixed tail is always in place.
    auto rd = rdata_bytes(msg, rr);
    base::ByteReader r(rd);
    if (!r.seek(rd.size() - 4)) continue;
    auto minimum = r.u32be();
    if (!minimum) continue;
    const std::uint32_t ttl = rr.ttl > kMaxSaneTtl ? 0 : rr.ttl;
    const std::uint32_t neg = std::min(ttl, *minimum);
    best = best ? std::min(*best, neg) : neg;
  }
  return best;
}

}  // namespace

base::Result<FilteredAnswer, FilterError> filter_upstream_answer(std::span<const std::uint8_t> msg,
                                                                 const AskedQuestion& asked,
                                                                 const policy::Policy& policy,
                                                                 const policy::HostAddresses& host) {
  Upstream up;
  switch (parse_upstream(msg, asked, up)) {
    case ParseOutcome::ok:
      break;
    case ParseOutcome::unparsable:
      return base::Err{FilterError::unparsable};
    case ParseOutcome::not_a_response:
      return base::Err{FilterError::not_a_response};
    case ParseOutcome::id_mismatch:
      return base::Err{FilterError::id_mismatch};
    case ParseOutcome::question_mismatch:
      return base::Err{FilterError::question_mismatch};
  }

  FilteredAnswer out;
  const Header& h = up.header;
  out.truncated = (h.flags_hi & kFlagsHiTC) != 0;
  // With EDNS the rcode has 12 bits (RFC 6891 section 6.1.3). The ones
  // defined (BADVERS 16, BADCOOKIE 23) fit our byte; anything above is no
  // answer we can act on.
  const unsigned full_rcode = (up.opt ? unsigned{up.opt->extended_rcode} << 4 : 0u) | h.rcode();
  out.rcode = full_rcode <= 0xFF ? static_cast<std::uint8_t>(full_rcode) : rcode::SERVFAIL;

  const Chain chain = follow_chain(msg, up);
  Filtering f{msg, up, policy, host, chain, out, {}, {}};

  // Fates per record, same layout as up.sections. RRSIGs are decided in a
  // second pass, once every other removal is known.
  std::array<std::vector<Fate>, 3> fates;
  for (std::size_t s = 0; s < 3; ++s) {
    const auto section = static_cast<Section>(s);
    fates[s].assign(up.sections[s].size(), Fate::keep);
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      const Record& rr = up.sections[s][i];
      if (rr.type == rr_type::RRSIG) continue;
      fates[s][i] = f.decide(section, rr);
      if (fates[s][i] != Fate::keep) f.stripped.add(section, up.owner(rr), rr.type);
    }
  }
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      const Record& rr = up.sections[s][i];
      if (rr.type == rr_type::RRSIG) fates[s][i] = f.rrsig(static_cast<Section>(s), rr);
    }
  }

  const std::optional<std::uint32_t> soa_negative =
      negative_ttl(msg, up.sections[static_cast<std::size_t>(Section::authority)]);

  // Header: ID 0 (the caller writes each guest's ID), QR and opcode QUERY,
  // AA TC RD RA AD CD as upstream set them, Z clear, the low 4 bits of the
  // rcode (the rest rides in the OPT). Counts are patched once known.
  MessageWriter w(out.wire);
  out.wire.reserve(std::min(kMaxMessageSize, msg.size() + kMinRecordSize));
  w.u16(0);
  w.u8(static_cast<std::uint8_t>(kFlagsHiQR | (h.flags_hi & (kFlagsHiAA | kFlagsHiTC | kFlagsHiRD))));
  w.u8(static_cast<std::uint8_t>((h.flags_lo & (kFlagsLoRA | kFlagsLoAD | kFlagsLoCD)) | h.rcode()));
  w.u16(1);  // QDCOUNT
  constexpr std::size_t kCountsAt = 6;
  w.u16(0);
  w.u16(0);
  w.u16(0);
  w.name(up.qname.view(), true);
  w.u16(up.qtype);
  w.u16(up.qclass);

  std::optional<std::uint32_t> positive_min;
  bool has_qtype_data = false;
  std::array<std::uint16_t, 3> kept{};
  for (std::size_t s = 0; s < 3; ++s) {
    const auto section = static_cast<Section>(s);
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      const Record& rr = up.sections[s][i];
      if (fates[s][i] != Fate::keep) {
        if (fates[s][i] == Fate::strip) ++out.stripped_records;
        continue;
      }
      const std::uint32_t ttl = clamp_ttl(rr.ttl, policy.dns());
      if (section == Section::answer) {
        positive_min = positive_min ? std::min(*positive_min, ttl) : ttl;
        if (rr.type == up.qtype || up.qtype == rr_type::ANY) has_qtype_data = true;
      }
      w.name(up.owner(rr), true);
      w.u16(rr.type);
      w.u16(rr.rclass);
      w.u32(ttl);
      write_rdata(w, msg, rr.rdata);
      ++kept[s];  // at most the section's count, a 16-bit number
    }
  }
  if (up.opt) {
    w.u8(0);  // owner "."
    w.u16(rr_type::OPT);
    w.u16(kMaxAdvertisedUdpSize);  // CLASS: the largest UDP payload we take
    w.u32((std::uint32_t{up.opt->extended_rcode} << 24) | (std::uint32_t{up.opt->version} << 16) |
          (up.opt->flags & kEdnsDoBit));
    w.u16(0);  // no options
  }
  if (w.overflowed()) return base::Err{FilterError::too_large};
  w.patch_u16(kCountsAt, kept[0]);
  w.patch_u16(kCountsAt + 2, kept[1]);
  w.patch_u16(kCountsAt + 4, static_cast<std::uint16_t>(kept[2] + (up.opt ? 1 : 0)));

  // cache_ttl: what was kept says how long the answer holds; a negative
  // answer (NXDOMAIN, or NOERROR without data of the asked type, also when
  // the filter removed it) holds no longer than its SOA allows.
  const bool negative = out.rcode == rcode::NXDOMAIN || (out.rcode == rcode::NOERROR && !has_qtype_data);
  const std::uint32_t min_ttl = policy.dns().min_ttl;
  if (negative) {
    const std::uint32_t neg = soa_negative ? clamp_ttl(*soa_negative, policy.dns()) : min_ttl;
    out.cache_ttl = positive_min ? std::min(*positive_min, neg) : neg;
  } else {
    out.cache_ttl = positive_min.value_or(min_ttl);
  }
  return out;
}

}  // namespace abox::dns
