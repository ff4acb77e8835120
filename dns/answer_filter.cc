// The upstream answer filter (see answer_filter.h for the rules).
//
// How this works. One call takes one upstream message and either refuses it
// or returns the cut-down answer. It owns nothing between calls; every ldns
// object it makes is held by a unique_ptr and freed on every path.
//
//   1. Header, read with base::ByteReader: QR set, opcode QUERY, our ID, one
//      question. These are cheap, so a message that is not ours costs no
//      parsing.
//   2. Records. Each record's extent (owner, fixed fields, RDLENGTH) is first
//      walked with ByteReader; then ldns_wire2rr() decodes exactly that
//      record, and its cursor must end where RDLENGTH says. We do not call
//      ldns_wire2pkt() because in ldns 1.8.3 it
//        - accepts a record whose RDATA is longer than its fields, and reads
//          the rest as the start of the next record, so a hidden record
//          (e.g. "A 127.0.0.1") can ride inside an innocent one;
//        - decrements ARCOUNT inside its own loop for each TSIG, silently
//          skipping trailing records, and leaks the first of two TSIGs;
//        - counts OPT records in a uint8_t, so 256 of them wrap and the
//          packet's ARCOUNT no longer matches its records.
//      The OPT record is read here (at most one, owner ".", additional section
//      only, as RFC 6891 requires) and only its header fields are kept.
//      Before ldns sees a TXT-like record we bound its character-string count:
//      ldns allocates RDLENGTH bytes for every string, so one 64 KiB record of
//      empty strings costs ldns gigabytes. And before ldns sees the message,
//      compression pointer chains are bounded (see pointer_chains_bounded):
//      ldns walks up to 65535 pointers per name.
//   3. Filtering. The CNAME/DNAME chain from the question name is followed in
//      the answer section (at most kMaxChainHops steps, a name seen twice
//      ends it). Every record gets a fate: kept, removed as a rebinding
//      attempt (reported), or stripped (counted). RRSIGs are decided last,
//      because they go with the RRset they cover: one whose RRset lost a
//      member at that owner and in that section is stripped with it.
//   4. Encoding. Kept records move into a fresh ldns_pkt (so the section
//      counts are the real ones), TTLs clamped, ID 0, the OPT rebuilt with
//      our UDP size and no options; ldns_pkt2buffer_wire_compress() writes
//      and compresses it, with a compression table of our own (see encode):
//      ldns's own is cubic in the labels of a name.
#include "dns/answer_filter.h"

#include "dns/ldns.h"
// clang-format on

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/byte_reader.h"
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
constexpr std::size_t kMaxNameWire = 255;
constexpr std::size_t kMaxLabelsPerName = 128;  // 127 one-byte labels and the root
// What ldns may allocate for character strings in one message (strings times
// RDLENGTH, summed). A 60 KB TXT record of 255-byte strings needs ~14 MiB.
constexpr std::size_t kStringAllocBudget = std::size_t{16} << 20;
// RFC 2181 section 8: a TTL with the top bit set is treated as zero.
constexpr std::uint32_t kMaxSaneTtl = 0x7FFF'FFFF;
constexpr std::uint16_t kEdnsDoBit = 0x8000;
// Pointers in a row that a name may go through (see pointer_chains_bounded).
constexpr std::size_t kMaxPointerChain = 16;

struct RrDeleter {
  void operator()(ldns_rr* rr) const { ldns_rr_free(rr); }
};
struct PktDeleter {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
struct MallocDeleter {  // strings ldns hands over (rdf2str)
  void operator()(void* p) const { std::free(p); }
};
struct BufferDeleter {
  void operator()(ldns_buffer* b) const { ldns_buffer_free(b); }
};
using RrPtr = std::unique_ptr<ldns_rr, RrDeleter>;
using PktPtr = std::unique_ptr<ldns_pkt, PktDeleter>;
using CStrPtr = std::unique_ptr<char, MallocDeleter>;
using BufferPtr = std::unique_ptr<ldns_buffer, BufferDeleter>;

// Sections in the order they appear; values are also keys of StrippedSet.
enum class Section : std::uint8_t { answer = 0, authority = 1, additional = 2 };

ldns_pkt_section to_ldns(Section s) {
  switch (s) {
    case Section::answer:
      return LDNS_SECTION_ANSWER;
    case Section::authority:
      return LDNS_SECTION_AUTHORITY;
    case Section::additional:
      return LDNS_SECTION_ADDITIONAL;
  }
  return LDNS_SECTION_ANY;
}

// ---------------------------------------------------------------------------
// Names. ldns hands out names as uncompressed wire form (length-prefixed
// labels ending with the root), which is what we compare. Folding A-Z over
// the whole wire form is safe: length bytes are at most 63, below 'A'.

using NameView = std::span<const std::uint8_t>;

std::uint8_t fold(std::uint8_t c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
}

bool name_equal(NameView a, NameView b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (fold(a[i]) != fold(b[i])) return false;
  return true;
}

NameView name_of(const ldns_rdf* rdf) {
  if (rdf == nullptr || ldns_rdf_get_type(rdf) != LDNS_RDF_TYPE_DNAME) return {};
  return {ldns_rdf_data(rdf), ldns_rdf_size(rdf)};
}

NameView owner_of(const ldns_rr* rr) {
  return name_of(ldns_rr_owner(rr));
}

// Offset in `name` at which `ancestor` starts as a whole-label suffix, when
// `name` is strictly below it (RFC 6672 DNAME applies only there).
std::optional<std::size_t> suffix_offset(NameView name, NameView ancestor) {
  if (ancestor.size() >= name.size()) return std::nullopt;
  std::size_t at = 0;
  while (at < name.size() && name[at] != 0) {
    at += 1 + std::size_t{name[at]};
    if (at >= name.size()) return std::nullopt;
    if (name.size() - at == ancestor.size()) {
      if (name_equal(name.subspan(at), ancestor)) return at;
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
    return std::any_of(names_.begin(), names_.end(), [&](const Name& c) { return name_equal(c, n); });
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
  bool aa() const { return (flags_hi & 0x04) != 0; }
  bool tc() const { return (flags_hi & 0x02) != 0; }
  bool rd() const { return (flags_hi & 0x01) != 0; }
  bool ra() const { return (flags_lo & 0x80) != 0; }
  bool ad() const { return (flags_lo & 0x20) != 0; }
  bool cd() const { return (flags_lo & 0x10) != 0; }
  std::uint8_t rcode() const { return flags_lo & 0x0F; }
};

struct Opt {
  std::uint16_t udp_size = 0;
  std::uint8_t extended_rcode = 0;
  std::uint8_t version = 0;
  std::uint16_t flags = 0;
};

struct Upstream {
  Header header;
  RrPtr question;
  std::array<std::vector<RrPtr>, 3> sections;  // indexed by Section
  std::optional<Opt> opt;
};

// Steps over a name to find where the record's fixed fields start. Pointers
// are not followed here: ldns decodes the name and checks them.
bool skip_name(base::ByteReader& r) {
  for (std::size_t labels = 0; labels < kMaxLabelsPerName; ++labels) {
    auto len = r.u8();
    if (!len) return false;
    if (*len == 0) return true;
    if ((*len & 0xC0) == 0xC0) return r.skip(1);
    if ((*len & 0xC0) != 0) return false;  // 0x40/0x80: extended label types, never valid in answers
    if (!r.skip(*len)) return false;
  }
  return false;
}

// Types whose RDATA ldns decodes as any number of character-strings.
bool is_string_list_type(std::uint16_t type) {
  const ldns_rr_descriptor* d = ldns_rr_descript(type);
  return d != nullptr && ldns_rr_descriptor_maximum(d) == UINT_MAX && d->_variable == LDNS_RDF_TYPE_STR;
}

std::size_t count_strings(std::span<const std::uint8_t> rdata) {
  std::size_t n = 0;
  for (std::size_t at = 0; at < rdata.size(); at += 1 + std::size_t{rdata[at]}) ++n;
  return n;
}

// Decodes one record at the reader's cursor and moves past it. nullptr when
// it is malformed, or when ldns's reading of it disagrees with its RDLENGTH.
RrPtr read_record(std::span<const std::uint8_t> msg, base::ByteReader& r, ldns_pkt_section section,
                  std::size_t& string_budget) {
  const std::size_t start = r.position();
  if (!skip_name(r)) return nullptr;
  auto type = r.u16be();
  if (!type || !r.skip(2)) return nullptr;  // class: ldns reads it
  if (section != LDNS_SECTION_QUESTION) {
    if (!r.skip(4)) return nullptr;  // TTL
    auto rdlength = r.u16be();
    if (!rdlength) return nullptr;
    auto rdata = r.bytes(*rdlength);
    if (!rdata) return nullptr;
    // The filter reads these RDATAs itself; anything but their one exact
    // shape is malformed (and an A of 5 bytes is how a record gets smuggled).
    if (*type == rr_type::A && *rdlength != 4) return nullptr;
    if (*type == rr_type::AAAA && *rdlength != 16) return nullptr;
    if ((*type == rr_type::CNAME || *type == rr_type::DNAME) && *rdlength == 0) return nullptr;
    if (is_string_list_type(*type)) {
      const std::size_t cost = count_strings(*rdata) * *rdlength;
      if (cost > string_budget) return nullptr;
      string_budget -= cost;
    }
  }
  const std::size_t end = r.position();

  std::size_t pos = start;
  ldns_rr* raw = nullptr;
  const ldns_status st = ldns_wire2rr(&raw, msg.data(), msg.size(), &pos, section);
  RrPtr rr(raw);
  if (st != LDNS_STATUS_OK || rr == nullptr) return nullptr;
  if (pos != end) return nullptr;  // ldns left RDATA unread, or read past it
  return rr;
}

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

bool question_matches(const ldns_rr* q, const AskedQuestion& asked) {
  return ldns_rr_get_type(q) == asked.qtype && ldns_rr_get_class(q) == asked.qclass &&
         name_equal(owner_of(q), asked.qname_wire);
}

// The OPT record's header fields (RFC 6891 section 6.1.3); its options are
// hop-by-hop (cookies, padding, client subnet) and are not passed on.
Opt read_opt(const ldns_rr* rr) {
  const std::uint32_t ttl = ldns_rr_ttl(rr);
  return Opt{static_cast<std::uint16_t>(ldns_rr_get_class(rr)), static_cast<std::uint8_t>(ttl >> 24),
             static_cast<std::uint8_t>((ttl >> 16) & 0xFF), static_cast<std::uint16_t>(ttl & 0xFFFF)};
}

// Compression pointers that land on other pointers. Encoders point at labels,
// so a real chain is one pointer long; but ldns follows up to 65535 pointers
// per name, in any direction, so one long chain plus thousands of names aimed
// at its end costs ldns 100 ms or more per 64 KiB message. We cannot know
// where ldns will find names (RDATA layouts are its business), so every byte
// pair that looks like a pointer is measured, and a chain longer than
// kMaxPointerChain refuses the message. Random bytes (signatures, keys) form
// such a chain with odds of about 0.2^15 per position. A cycle is left to
// ldns: the first name that enters one fails the whole parse, once.
bool pointer_chains_bounded(std::span<const std::uint8_t> msg) {
  constexpr std::uint8_t kUnknown = 0;
  constexpr std::uint8_t kOnPath = 0xFF;
  // Pointers from here until a non-pointer; kOnPath while being walked.
  std::vector<std::uint8_t> depth(msg.size(), kUnknown);
  std::vector<std::size_t> path;
  path.reserve(kMaxPointerChain);
  auto is_pointer = [&](std::size_t at) { return at + 1 < msg.size() && (msg[at] & 0xC0) == 0xC0; };
  for (std::size_t start = 0; start < msg.size(); ++start) {
    if (!is_pointer(start) || depth[start] != kUnknown) continue;
    path.clear();
    std::size_t at = start;
    std::size_t hops = 0;
    while (is_pointer(at) && depth[at] != kOnPath) {
      if (depth[at] != kUnknown) {
        hops = depth[at];
        break;
      }
      if (path.size() == kMaxPointerChain) return false;
      depth[at] = kOnPath;
      path.push_back(at);
      at = (std::size_t{msg[at] & 0x3Fu} << 8) | msg[at + 1];
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      if (++hops > kMaxPointerChain) return false;
      depth[*it] = static_cast<std::uint8_t>(hops);
    }
  }
  return true;
}

ParseOutcome parse_upstream(std::span<const std::uint8_t> msg, const AskedQuestion& asked, Upstream& up) {
  if (msg.size() < kHeaderSize || msg.size() > kMaxMessageSize) return ParseOutcome::unparsable;
  base::ByteReader r(msg);
  if (auto o = read_header(r, asked, up.header); o != ParseOutcome::ok) return o;
  if (!pointer_chains_bounded(msg)) return ParseOutcome::unparsable;

  std::size_t string_budget = kStringAllocBudget;
  up.question = read_record(msg, r, LDNS_SECTION_QUESTION, string_budget);
  if (up.question == nullptr) return ParseOutcome::unparsable;
  if (!question_matches(up.question.get(), asked)) return ParseOutcome::question_mismatch;

  const std::array<std::pair<Section, std::uint16_t>, 3> counts = {{
      {Section::answer, up.header.ancount},
      {Section::authority, up.header.nscount},
      {Section::additional, up.header.arcount},
  }};
  for (const auto& [section, count] : counts) {
    auto& list = up.sections[static_cast<std::size_t>(section)];
    for (std::uint32_t i = 0; i < count; ++i) {
      // Every record takes at least 11 bytes, so a count the message cannot
      // hold fails here without ldns allocating for it.
      RrPtr rr = read_record(msg, r, to_ldns(section), string_budget);
      if (rr == nullptr) return ParseOutcome::unparsable;
      if (ldns_rr_get_type(rr.get()) == LDNS_RR_TYPE_OPT) {
        const bool root_owner = owner_of(rr.get()).size() == 1;
        if (section != Section::additional || up.opt || !root_owner) return ParseOutcome::unparsable;
        up.opt = read_opt(rr.get());
        continue;
      }
      list.push_back(std::move(rr));
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

std::string owner_text(const ldns_rr* rr) {
  // ldns escapes non-printable bytes (\DDD), so the text is safe to log.
  CStrPtr s(ldns_rdf2str(ldns_rr_owner(rr)));
  return s ? std::string(s.get()) : std::string("?");
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
    for (std::uint8_t c : owner) k.push_back(static_cast<char>(fold(c)));
    return k;
  }
  std::unordered_set<std::string> keys_;
};

// The type an RRSIG covers, when its RDATA has that field.
std::optional<std::uint16_t> rrsig_covers(const ldns_rr* rr) {
  const ldns_rdf* covered = ldns_rr_rd_count(rr) > 0 ? ldns_rr_rdf(rr, 0) : nullptr;
  if (covered == nullptr || ldns_rdf_get_type(covered) != LDNS_RDF_TYPE_TYPE || ldns_rdf_size(covered) != 2)
    return std::nullopt;
  return ldns_rdf2native_int16(covered);
}

// Follows CNAMEs, then DNAMEs, from the question name through the answer
// section. A DNAME step is synthesized (RFC 6672) only when the upstream sent
// no CNAME for that name, as old servers do.
Chain follow_chain(const std::vector<RrPtr>& answer, const ldns_rr* question) {
  Chain chain(owner_of(question));
  const std::uint16_t qclass = ldns_rr_get_class(question);
  for (int hop = 0; hop < kMaxChainHops; ++hop) {
    const Name& current = chain.last();
    std::optional<Name> next;
    for (const auto& rr : answer) {
      if (ldns_rr_get_type(rr.get()) != LDNS_RR_TYPE_CNAME || ldns_rr_get_class(rr.get()) != qclass) continue;
      if (!name_equal(owner_of(rr.get()), current)) continue;
      NameView target = name_of(ldns_rr_rdf(rr.get(), 0));
      if (!target.empty()) next.emplace(target.begin(), target.end());
      break;  // several CNAMEs at one name is malformed: the first one counts
    }
    if (!next) {
      for (const auto& rr : answer) {
        if (ldns_rr_get_type(rr.get()) != LDNS_RR_TYPE_DNAME || ldns_rr_get_class(rr.get()) != qclass)
          continue;
        NameView owner = owner_of(rr.get());
        NameView target = name_of(ldns_rr_rdf(rr.get(), 0));
        auto cut = suffix_offset(current, owner);
        if (!cut || target.empty()) continue;
        if (*cut + target.size() > kMaxNameWire) break;  // YXDOMAIN: the chain ends
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
  const policy::Policy& egress;
  const Chain& chain;
  std::uint16_t qclass;
  FilteredAnswer& out;
  StrippedSet stripped;
  // Index into out.addresses: a 64 KiB answer holds ~4000 address records.
  std::unordered_map<policy::IpAddress, std::size_t, policy::IpAddressHash> address_index;

  // An address record owned by a chain name, in the answer section.
  Fate address(const ldns_rr* rr) {
    if (ldns_rr_get_class(rr) != kClassIN) return Fate::strip;  // a CH "A" is no IPv4 address
    const ldns_rdf* rd = ldns_rr_rdf(rr, 0);
    if (rd == nullptr) return Fate::strip;
    policy::IpAddress ip;
    if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_A && ldns_rdf_size(rd) == 4) {
      ip = policy::IpAddress::v4_bytes(ldns_rdf_data(rd));
    } else if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_AAAA && ldns_rdf_size(rd) == 16) {
      std::array<std::uint8_t, 16> b{};
      std::copy_n(ldns_rdf_data(rd), b.size(), b.begin());
      ip = policy::IpAddress::v6(b);
    } else {
      return Fate::strip;  // read_record guarantees the sizes; keep the check local
    }
    const policy::AddressVerdict v = egress.check_address(ip);
    if (v.refused()) {
      out.rebinding.push_back(RemovedAddress{ip, owner_text(rr), v.reserved});
      return Fate::rebinding;
    }
    const std::uint32_t ttl = clamp_ttl(ldns_rr_ttl(rr), egress.dns());
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
  Fate decide(Section s, const ldns_rr* rr) {
    const std::uint16_t type = ldns_rr_get_type(rr);
    if (is_service_binding(type) || is_meta(type)) return Fate::strip;
    const bool is_address = type == rr_type::A || type == rr_type::AAAA;
    if (s != Section::answer) return is_address ? Fate::strip : Fate::keep;  // no glue

    // The answer section speaks only about the chain: whatever is owned by
    // another name (and in another class) was not asked for.
    if (ldns_rr_get_class(rr) != qclass) return Fate::strip;
    NameView owner = owner_of(rr);
    const bool on_chain = chain.contains(owner);
    if (is_address) return on_chain ? address(rr) : Fate::strip;
    if (type == rr_type::DNAME) return on_chain || chain.has_descendant_of(owner) ? Fate::keep : Fate::strip;
    return on_chain ? Fate::keep : Fate::strip;
  }

  Fate rrsig(Section s, const ldns_rr* rr) {
    auto covered = rrsig_covers(rr);
    if (!covered || is_service_binding(*covered)) return Fate::strip;
    NameView owner = owner_of(rr);
    if (s == Section::answer) {
      if (ldns_rr_get_class(rr) != qclass) return Fate::strip;
      const bool governs_chain = *covered == rr_type::DNAME && chain.has_descendant_of(owner);
      if (!chain.contains(owner) && !governs_chain) return Fate::strip;
    }
    return stripped.contains(s, owner, *covered) ? Fate::strip : Fate::keep;
  }
};

// Compression. ldns_pkt2wire compresses with a tree ordered by
// ldns_dname_compare, which seeks every label from the left: quadratic per
// comparison, and cubic to insert a name whose labels repeat. Encoding one
// answer to a 126-label question took 12 ms, a 1 KB answer naming it 65
// times 24 ms, and a guest may ask for such names under any wildcard it is
// allowed. Compression only asks "seen this name?", so the same ldns encoder
// gets a tree ordered by length, then case-folded bytes: linear per
// comparison, and equal exactly when ldns_dname_compare says equal.
int compression_order(const void* a, const void* b) {
  NameView x = name_of(static_cast<const ldns_rdf*>(a));
  NameView y = name_of(static_cast<const ldns_rdf*>(b));
  if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (fold(x[i]) != fold(y[i])) return fold(x[i]) < fold(y[i]) ? -1 : 1;
  }
  return 0;
}

// Nodes and keys are ldns_malloc'ed by ldns_dname2buffer_wire_compress.
void free_compression_node(ldns_rbnode_t* node, void*) {
  ldns_rdf_deep_free(const_cast<ldns_rdf*>(static_cast<const ldns_rdf*>(node->key)));
  std::free(node);
}

struct CompressionTreeDeleter {
  void operator()(ldns_rbtree_t* tree) const {
    ldns_traverse_postorder(tree, free_compression_node, nullptr);
    ldns_rbtree_free(tree);
  }
};
using CompressionTreePtr = std::unique_ptr<ldns_rbtree_t, CompressionTreeDeleter>;

// The wire form of pkt, compressed, or nullopt when it does not fit in one
// message (or memory ran out).
std::optional<std::vector<std::uint8_t>> encode(const ldns_pkt* pkt) {
  BufferPtr buffer(ldns_buffer_new(LDNS_MAX_PACKETLEN));
  CompressionTreePtr tree(ldns_rbtree_create(compression_order));
  if (buffer == nullptr || tree == nullptr) return std::nullopt;
  // Returns OK whatever happened; the buffer's status tells.
  (void)ldns_pkt2buffer_wire_compress(buffer.get(), pkt, tree.get());
  if (ldns_buffer_status(buffer.get()) != LDNS_STATUS_OK) return std::nullopt;
  const std::size_t size = ldns_buffer_position(buffer.get());
  // Past 65535 bytes ldns's RDLENGTH bookkeeping (a uint16_t offset) is
  // wrong as well: such output is never sent.
  if (size < kHeaderSize || size > kMaxMessageSize) return std::nullopt;
  const std::uint8_t* data = ldns_buffer_begin(buffer.get());
  return std::vector<std::uint8_t>(data, data + size);
}

bool push(ldns_pkt* pkt, ldns_pkt_section section, RrPtr rr) {
  if (!ldns_pkt_push_rr(pkt, section, rr.get())) return false;  // still ours: rr frees it
  (void)rr.release();                                           // the packet owns it now
  return true;
}

// RFC 2308 section 5: a negative answer lives min(SOA TTL, SOA MINIMUM).
std::optional<std::uint32_t> negative_ttl(const std::vector<RrPtr>& authority) {
  std::optional<std::uint32_t> best;
  for (const auto& rr : authority) {
    if (rr == nullptr || ldns_rr_get_type(rr.get()) != LDNS_RR_TYPE_SOA) continue;
    if (ldns_rr_rd_count(rr.get()) != 7) continue;  // a truncated SOA says nothing
    const ldns_rdf* minimum = ldns_rr_rdf(rr.get(), 6);
    if (ldns_rdf_size(minimum) != 4) continue;
    const std::uint32_t ttl = ldns_rr_ttl(rr.get()) > kMaxSaneTtl ? 0 : ldns_rr_ttl(rr.get());
    const std::uint32_t neg = std::min(ttl, ldns_rdf2native_int32(minimum));
    best = best ? std::min(*best, neg) : neg;
  }
  return best;
}

}  // namespace

base::Result<FilteredAnswer, FilterError> filter_upstream_answer(std::span<const std::uint8_t> msg,
                                                                 const AskedQuestion& asked,
                                                                 const policy::Policy& policy) {
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
  out.truncated = h.tc();
  // With EDNS the rcode has 12 bits (RFC 6891 section 6.1.3). The ones
  // defined (BADVERS 16, BADCOOKIE 23) fit our byte; anything above is no
  // answer we can act on.
  const unsigned full_rcode = (up.opt ? unsigned{up.opt->extended_rcode} << 4 : 0u) | h.rcode();
  out.rcode = full_rcode <= 0xFF ? static_cast<std::uint8_t>(full_rcode) : rcode::SERVFAIL;

  const std::uint16_t qtype = ldns_rr_get_type(up.question.get());
  const Chain chain = follow_chain(up.sections[static_cast<std::size_t>(Section::answer)], up.question.get());
  Filtering f{policy, chain, static_cast<std::uint16_t>(ldns_rr_get_class(up.question.get())), out, {}, {}};

  // Fates per record, same layout as up.sections. RRSIGs are decided in a
  // second pass, once every other removal is known.
  std::array<std::vector<Fate>, 3> fates;
  for (std::size_t s = 0; s < 3; ++s) {
    const auto section = static_cast<Section>(s);
    fates[s].assign(up.sections[s].size(), Fate::keep);
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      const ldns_rr* rr = up.sections[s][i].get();
      if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_RRSIG) continue;
      fates[s][i] = f.decide(section, rr);
      if (fates[s][i] != Fate::keep) f.stripped.add(section, owner_of(rr), ldns_rr_get_type(rr));
    }
  }
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      const ldns_rr* rr = up.sections[s][i].get();
      if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_RRSIG) fates[s][i] = f.rrsig(static_cast<Section>(s), rr);
    }
  }

  // Negative answers first need the SOA, before its record moves out.
  const std::optional<std::uint32_t> soa_negative =
      negative_ttl(up.sections[static_cast<std::size_t>(Section::authority)]);

  PktPtr pkt(ldns_pkt_new());
  if (pkt == nullptr) return base::Err{FilterError::too_large};  // out of memory: nothing to send
  ldns_pkt_set_id(pkt.get(), 0);                                 // the caller writes each guest's ID
  ldns_pkt_set_qr(pkt.get(), true);
  ldns_pkt_set_opcode(pkt.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_aa(pkt.get(), h.aa());
  ldns_pkt_set_tc(pkt.get(), h.tc());
  ldns_pkt_set_rd(pkt.get(), h.rd());
  ldns_pkt_set_ra(pkt.get(), h.ra());
  ldns_pkt_set_ad(pkt.get(), h.ad());
  ldns_pkt_set_cd(pkt.get(), h.cd());
  ldns_pkt_set_rcode(pkt.get(), h.rcode());  // the low 4 bits; the rest rides in the OPT
  if (up.opt) {
    ldns_pkt_set_edns_udp_size(pkt.get(), kMaxAdvertisedUdpSize);
    ldns_pkt_set_edns_extended_rcode(pkt.get(), up.opt->extended_rcode);
    ldns_pkt_set_edns_version(pkt.get(), up.opt->version);
    ldns_pkt_set_edns_z(pkt.get(), static_cast<std::uint16_t>(up.opt->flags & kEdnsDoBit));
  }
  if (!push(pkt.get(), LDNS_SECTION_QUESTION, std::move(up.question)))
    return base::Err{FilterError::too_large};

  std::optional<std::uint32_t> positive_min;
  bool has_qtype_data = false;
  for (std::size_t s = 0; s < 3; ++s) {
    const auto section = static_cast<Section>(s);
    for (std::size_t i = 0; i < up.sections[s].size(); ++i) {
      RrPtr& rr = up.sections[s][i];
      if (fates[s][i] != Fate::keep) {
        if (fates[s][i] == Fate::strip) ++out.stripped_records;
        continue;
      }
      const std::uint32_t ttl = clamp_ttl(ldns_rr_ttl(rr.get()), policy.dns());
      ldns_rr_set_ttl(rr.get(), ttl);
      if (section == Section::answer) {
        positive_min = positive_min ? std::min(*positive_min, ttl) : ttl;
        const std::uint16_t type = ldns_rr_get_type(rr.get());
        if (type == qtype || qtype == rr_type::ANY) has_qtype_data = true;
      }
      if (!push(pkt.get(), to_ldns(section), std::move(rr))) return base::Err{FilterError::too_large};
    }
  }

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

  std::optional<std::vector<std::uint8_t>> wire = encode(pkt.get());
  if (!wire) return base::Err{FilterError::too_large};
  out.wire = std::move(*wire);
  out.wire[0] = 0;  // already 0 from ldns_pkt_set_id; the contract says so
  out.wire[1] = 0;
  return out;
}

}  // namespace abox::dns
