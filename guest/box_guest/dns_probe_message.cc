// DNS for the self-test (see dns_probe_message.h for what is checked).
#include "guest/box_guest/dns_probe_message.h"

#include <string>

#include "base/byte_reader.h"

namespace abox::guest {
namespace {

constexpr std::uint16_t kTypeA = 1;
constexpr std::uint16_t kClassIn = 1;
constexpr std::size_t kMaxName = 255;  // wire bytes
constexpr int kMaxPointers = 64;

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool host_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// The name's labels, lowercased and joined by dots (no trailing dot), or
// false. Follows compression pointers; leaves `r` after the name as it
// appears at its position (the first pointer ends it there).
bool read_name(base::ByteReader& r, std::span<const std::uint8_t> message, std::string& out) {
  out.clear();
  base::ByteReader at = r;  // where labels are read from; r moves only until the first pointer
  bool jumped = false;
  std::size_t wire = 0;
  for (int pointers = 0;;) {
    const std::size_t label_start = at.position();
    auto len = at.u8();
    if (!len) return false;
    if (*len == 0) {
      wire += 1;
      break;
    }
    if ((*len & 0xC0) == 0xC0) {
      auto low = at.u8();
      if (!low || ++pointers > kMaxPointers) return false;
      const std::size_t target = (std::size_t{*len & 0x3Fu} << 8) | *low;
      if (target >= label_start) return false;  // only backwards: no loops
      if (!jumped) {
        r = at;
        jumped = true;
      }
      at = base::ByteReader(message);
      if (!at.seek(target)) return false;
      continue;
    }
    if ((*len & 0xC0) != 0) return false;  // 0x40 and 0x80 label types
    auto label = at.bytes(*len);
    if (!label) return false;
    wire += 1 + *len;
    if (wire + 1 > kMaxName) return false;
    if (!out.empty()) out.push_back('.');
    for (auto b : *label) out.push_back(lower(static_cast<char>(b)));
  }
  if (!jumped) r = at;
  return true;
}

std::string canonical(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::string s;
  for (char c : name) s.push_back(lower(c));
  return s;
}

}  // namespace

bool build_a_query(std::string_view name, std::uint16_t id, std::vector<std::uint8_t>& out) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253) return false;
  std::vector<std::uint8_t> q = {
      static_cast<std::uint8_t>(id >> 8), static_cast<std::uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  std::size_t at = 0;
  while (at <= name.size()) {
    std::size_t dot = name.find('.', at);
    if (dot == std::string_view::npos) dot = name.size();
    const std::size_t n = dot - at;
    if (n == 0 || n > 63) return false;
    q.push_back(static_cast<std::uint8_t>(n));
    for (std::size_t i = at; i < dot; ++i) {
      if (!host_name_char(name[i])) return false;
      q.push_back(static_cast<std::uint8_t>(name[i]));
    }
    at = dot + 1;
  }
  q.insert(q.end(), {0, 0, kTypeA, 0, kClassIn});
  out.insert(out.end(), q.begin(), q.end());
  return true;
}

std::string_view dns_answer_error_name(DnsAnswerError e) {
  switch (e) {
    case DnsAnswerError::kShortHeader:
      return "shorter than a DNS header";
    case DnsAnswerError::kOtherId:
      return "another query's ID";
    case DnsAnswerError::kNotResponse:
      return "not a response";
    case DnsAnswerError::kNotQuery:
      return "opcode is not QUERY";
    case DnsAnswerError::kQuestionCount:
      return "not one question";
    case DnsAnswerError::kBadName:
      return "a malformed name";
    case DnsAnswerError::kQuestionMismatch:
      return "the question is not the query's";
    case DnsAnswerError::kRecordPastEnd:
      return "a record runs past the end";
    case DnsAnswerError::kBadARecord:
      return "an A record whose data is not 4 bytes";
  }
  return "DNS answer error";
}

bool dns_answer_is_someone_elses(DnsAnswerError e) {
  return e == DnsAnswerError::kOtherId || e == DnsAnswerError::kNotResponse ||
         e == DnsAnswerError::kQuestionMismatch;
}

std::string_view dns_rcode_name(std::uint8_t rcode) {
  switch (rcode) {
    case 0:
      return "NOERROR";
    case 1:
      return "FORMERR";
    case 2:
      return "SERVFAIL";
    case 3:
      return "NXDOMAIN";
    case 4:
      return "NOTIMP";
    case 5:
      return "REFUSED";
    default:
      return "RCODE";
  }
}

base::Result<DnsAnswerSummary, DnsAnswerError> parse_a_answer(std::span<const std::uint8_t> message,
                                                              std::uint16_t id, std::string_view name) {
  using base::Err;
  base::ByteReader r(message);
  auto got_id = r.u16be();
  auto flags = r.u16be();
  auto qdcount = r.u16be();
  auto ancount = r.u16be();
  if (!got_id || !flags || !qdcount || !ancount || !r.skip(4)) return Err{DnsAnswerError::kShortHeader};
  if (*got_id != id) return Err{DnsAnswerError::kOtherId};
  if ((*flags & 0x8000) == 0) return Err{DnsAnswerError::kNotResponse};
  if (((*flags >> 11) & 0xF) != 0) return Err{DnsAnswerError::kNotQuery};
  DnsAnswerSummary s;
  s.rcode = static_cast<std::uint8_t>(*flags & 0xF);
  s.truncated = (*flags & 0x0200) != 0;
  s.answer_count = *ancount;

  if (*qdcount == 0) {
    if (s.rcode == 0 || *ancount != 0) return Err{DnsAnswerError::kQuestionCount};
    return s;
  }
  if (*qdcount != 1) return Err{DnsAnswerError::kQuestionCount};
  std::string qname;
  if (!read_name(r, message, qname)) return Err{DnsAnswerError::kBadName};
  auto qtype = r.u16be();
  auto qclass = r.u16be();
  if (!qtype || !qclass) return Err{DnsAnswerError::kRecordPastEnd};
  if (qname != canonical(name) || *qtype != kTypeA || *qclass != kClassIn)
    return Err{DnsAnswerError::kQuestionMismatch};

  std::string owner;
  for (std::uint16_t i = 0; i < *ancount; ++i) {
    if (!read_name(r, message, owner)) return Err{DnsAnswerError::kBadName};
    auto type = r.u16be();
    auto klass = r.u16be();
    auto ttl = r.u32be();
    auto rdlength = r.u16be();
    if (!type || !klass || !ttl || !rdlength) return Err{DnsAnswerError::kRecordPastEnd};
    auto rdata = r.bytes(*rdlength);
    if (!rdata) return Err{DnsAnswerError::kRecordPastEnd};
    if (*type == kTypeA && *klass == kClassIn) {
      if (rdata->size() != 4) return Err{DnsAnswerError::kBadARecord};
      base::ByteReader a(*rdata);
      if (s.a_count < s.a.size()) s.a[s.a_count] = *a.u32be();
      ++s.a_count;
    }
  }
  return s;
}

}  // namespace abox::guest
