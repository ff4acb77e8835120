// RDATA of upstream records: which types the gate reads field by field, and
// how their RDATA is checked and written again for the guest.
//
// RFC 3597 section 4 decides it:
//   - the RFC 1035 types that carry names (NS, MD, MF, CNAME, SOA, MB, MG, MR,
//     PTR, MINFO, MX) are read with their names decompressed, and written
//     with their names compressed again;
//   - RP, AFSDB, RT, SIG, PX, NXT, SRV and NAPTR (the "SHOULD decompress" list),
//     and DNAME, RRSIG and NSEC (whose RFCs forbid compression but which
//     resolvers decompress anyway) are read with their names decompressed and
//     written with them in full;
//   - A, AAAA, TXT and HINFO are checked for their exact shape (an A of 5
//     bytes is how a record gets smuggled);
//   - every other type is opaque: its RDATA is copied byte for byte and a
//     "pointer" inside it is just two bytes (they never mean anything there).
// A checked RDATA fills RDLENGTH exactly: a name or string that stops early
// or runs past it refuses the record, so nothing can hide after the fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "dns/message_writer.h"
#include "dns/name.h"

namespace abox::dns {

// Where a record's RDATA sits in the message it came from.
struct RdataRef {
  std::uint16_t type = 0;
  std::size_t at = 0;  // offset of the first RDATA byte in the message
  std::uint16_t length = 0;
};

// True when rd's RDATA has its type's shape (see above). Names in it are read
// with read_name's rules, pointers into `msg`.
bool rdata_well_formed(std::span<const std::uint8_t> msg, const RdataRef& rd);

// Writes RDLENGTH and RDATA of a record that passed rdata_well_formed.
void write_rdata(MessageWriter& w, std::span<const std::uint8_t> msg, const RdataRef& rd);

// The first field of rd read as a name (CNAME and DNAME targets), when it is one.
std::optional<WireName> rdata_first_name(std::span<const std::uint8_t> msg, const RdataRef& rd);

}  // namespace abox::dns
