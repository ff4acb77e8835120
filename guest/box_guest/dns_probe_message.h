// The DNS the self-test speaks: one A query, and what its answer says
// (RFC 1035). Sans-I/O; the reply is untrusted bytes from whatever answered.
//
// build_a_query(): a standard query, RD set, one question (name, A, IN).
// The name must be a host name: labels of 1-63 letters, digits, '-' or '_',
// at most 253 characters, one trailing dot allowed.
//
// parse_a_answer() reads a reply through one base::ByteReader and checks:
//   - the 12-byte header is there; the ID is the query's and QR is set
//     (else kOtherId / kNotResponse: someone else's, ignored by the caller);
//     the opcode is QUERY;
//   - one question, equal to the query's (name compared case-insensitively,
//     type A, class IN); a reply with no question is accepted only when it
//     is an error (RCODE not 0) with no answers, as some servers send those;
//   - names: labels of at most 63 bytes, at most 255 bytes in all,
//     each compression pointer pointing before itself and at most 64 of
//     them per name (so a loop ends); label types 0x40 and 0x80 refused;
//   - every answer record lies inside the message; an A record of class IN
//     has exactly 4 bytes of data.
// The authority and additional sections are not read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace abox::guest {

// False (out untouched) when `name` is not a host name.
bool build_a_query(std::string_view name, std::uint16_t id, std::vector<std::uint8_t>& out);

struct DnsAnswerSummary {
  std::uint8_t rcode = 0;
  bool truncated = false;
  std::uint16_t answer_count = 0;    // records in the answer section, of any type
  std::size_t a_count = 0;           // A records (class IN) among them
  std::array<std::uint32_t, 4> a{};  // the first few, host byte order
};

enum class DnsAnswerError : std::uint8_t {
  kShortHeader,
  kOtherId,
  kNotResponse,
  kNotQuery,
  kQuestionCount,
  kBadName,
  kQuestionMismatch,
  kRecordPastEnd,
  kBadARecord,
};
std::string_view dns_answer_error_name(DnsAnswerError e);
// True when the reply is not an answer to this query at all.
bool dns_answer_is_someone_elses(DnsAnswerError e);

base::Result<DnsAnswerSummary, DnsAnswerError> parse_a_answer(std::span<const std::uint8_t> message,
                                                              std::uint16_t id, std::string_view name);

std::string_view dns_rcode_name(std::uint8_t rcode);

}  // namespace abox::guest
