// RDATA layouts (see rdata.h for which types and why). How this works: each
// known type has a short list of fields; rdata_well_formed() walks the list
// over the record's RDATA with one ByteReader over the whole message (names
// may point back into it) and wants the walk to end exactly at RDLENGTH;
// write_rdata() walks the same list again, writing each field, names through
// the MessageWriter. A type without a layout is opaque.
#include "dns/rdata.h"

#include <array>

#include "base/byte_reader.h"

namespace abox::dns {

namespace {

enum class Field : std::uint8_t {
  end,      // no more fields
  fixed,    // `size` bytes
  name,     // a domain name
  string,   // one character-string: a length byte and that many bytes
  strings,  // character-strings up to the end of the RDATA (none is fine)
  rest,     // opaque bytes up to the end of the RDATA
};

struct FieldSpec {
  Field kind = Field::end;
  std::uint8_t size = 0;  // for Field::fixed
};

struct Layout {
  std::array<FieldSpec, 6> fields{};
  bool compress = false;  // RFC 1035 type: its names may be compressed on output
};

constexpr FieldSpec fixed(std::uint8_t n) {
  return {Field::fixed, n};
}
constexpr FieldSpec kName{Field::name, 0};
constexpr FieldSpec kString{Field::string, 0};
constexpr FieldSpec kStrings{Field::strings, 0};
constexpr FieldSpec kRest{Field::rest, 0};

constexpr Layout kAddress4{{fixed(4)}, false};
constexpr Layout kAddress6{{fixed(16)}, false};
constexpr Layout kOneName{{kName}, true};                       // NS MD MF CNAME MB MG MR PTR
constexpr Layout kSoa{{kName, kName, fixed(20)}, true};         // serial refresh retry expire minimum
constexpr Layout kTwoNames{{kName, kName}, true};               // MINFO
constexpr Layout kPreferenceName{{fixed(2), kName}, true};      // MX
constexpr Layout kText{{kStrings}, false};                      // TXT
constexpr Layout kHinfo{{kString, kString}, false};             // CPU, OS
constexpr Layout kRp{{kName, kName}, false};                    // mailbox, TXT owner
constexpr Layout kShortName{{fixed(2), kName}, false};          // AFSDB RT
constexpr Layout kSignature{{fixed(18), kName, kRest}, false};  // SIG RRSIG: fields, signer, signature
constexpr Layout kPx{{fixed(2), kName, kName}, false};
constexpr Layout kNameBitmap{{kName, kRest}, false};  // NXT NSEC
constexpr Layout kSrv{{fixed(6), kName}, false};      // priority weight port target
constexpr Layout kNaptr{{fixed(4), kString, kString, kString, kName}, false};
constexpr Layout kDname{{kName}, false};  // RFC 6672: never compressed

const Layout* layout_of(std::uint16_t type) {
  switch (type) {
    case 1:  // A
      return &kAddress4;
    case 2:   // NS
    case 3:   // MD
    case 4:   // MF
    case 5:   // CNAME
    case 7:   // MB
    case 8:   // MG
    case 9:   // MR
    case 12:  // PTR
      return &kOneName;
    case 6:  // SOA
      return &kSoa;
    case 13:  // HINFO
      return &kHinfo;
    case 14:  // MINFO
      return &kTwoNames;
    case 15:  // MX
      return &kPreferenceName;
    case 16:  // TXT
      return &kText;
    case 17:  // RP
      return &kRp;
    case 18:  // AFSDB
    case 21:  // RT
      return &kShortName;
    case 24:  // SIG
    case 46:  // RRSIG
      return &kSignature;
    case 26:  // PX
      return &kPx;
    case 28:  // AAAA
      return &kAddress6;
    case 30:  // NXT
    case 47:  // NSEC
      return &kNameBitmap;
    case 33:  // SRV
      return &kSrv;
    case 35:  // NAPTR
      return &kNaptr;
    case 39:  // DNAME
      return &kDname;
    default:
      return nullptr;
  }
}

// Walks rd's fields; on_field(spec, bytes or name) is called for each, in
// order (the name is only filled in with kCopyNames). False when a field does
// not fit, or the fields do not end exactly at RDLENGTH.
template <bool kCopyNames, class OnField>
bool walk_rdata(std::span<const std::uint8_t> msg, const RdataRef& rd, const Layout& layout,
                OnField&& on_field) {
  if (rd.at > msg.size() || rd.length > msg.size() - rd.at) return false;
  const std::size_t end = rd.at + rd.length;
  base::ByteReader r(msg);
  if (!r.seek(rd.at)) return false;
  auto take = [&](std::size_t n) -> std::optional<std::span<const std::uint8_t>> {
    if (n > end - r.position()) return std::nullopt;
    return r.bytes(n);
  };
  for (const FieldSpec& f : layout.fields) {
    switch (f.kind) {
      case Field::end:
        return r.position() == end;
      case Field::fixed: {
        auto b = take(f.size);
        if (!b) return false;
        on_field(f, *b, nullptr);
        break;
      }
      case Field::name: {
        WireName n;
        // A name may run past `end` inside the message before this notices;
        // it is still read within the message's bounds, then refused. It is
        // copied out only for a caller that uses it.
        if (read_name(r, kCopyNames ? &n : nullptr) || r.position() > end) return false;
        on_field(f, std::span<const std::uint8_t>{}, &n);
        break;
      }
      case Field::string: {
        auto length = r.position() < end ? r.peek() : std::nullopt;
        auto b = length ? take(1 + std::size_t{*length}) : std::nullopt;
        if (!b) return false;
        on_field(f, *b, nullptr);
        break;
      }
      case Field::strings:
        while (r.position() < end) {
          auto length = r.peek();
          auto b = length ? take(1 + std::size_t{*length}) : std::nullopt;
          if (!b) return false;
          on_field(f, *b, nullptr);
        }
        break;
      case Field::rest: {
        auto b = take(end - r.position());
        if (!b) return false;
        on_field(f, *b, nullptr);
        break;
      }
    }
  }
  return r.position() == end;
}

}  // namespace

bool rdata_well_formed(std::span<const std::uint8_t> msg, const RdataRef& rd) {
  const Layout* layout = layout_of(rd.type);
  if (layout == nullptr) return rd.at <= msg.size() && rd.length <= msg.size() - rd.at;
  return walk_rdata<false>(msg, rd, *layout,
                           [](const FieldSpec&, std::span<const std::uint8_t>, const WireName*) {});
}

void write_rdata(MessageWriter& w, std::span<const std::uint8_t> msg, const RdataRef& rd) {
  const std::size_t length_at = w.size();
  w.u16(0);  // RDLENGTH, patched below
  const Layout* layout = layout_of(rd.type);
  if (layout == nullptr) {
    w.bytes(msg.subspan(rd.at, rd.length));  // checked by rdata_well_formed
  } else {
    (void)walk_rdata<true>(msg, rd, *layout,
                           [&](const FieldSpec&, std::span<const std::uint8_t> b, const WireName* name) {
                             if (name != nullptr)
                               w.name(name->view(), layout->compress);
                             else
                               w.bytes(b);
                           });
  }
  if (w.overflowed()) return;
  // At most 65535 - 12: the whole message is bounded by the writer.
  w.patch_u16(length_at, static_cast<std::uint16_t>(w.size() - length_at - 2));
}

std::optional<WireName> rdata_first_name(std::span<const std::uint8_t> msg, const RdataRef& rd) {
  const Layout* layout = layout_of(rd.type);
  if (layout == nullptr || layout->fields[0].kind != Field::name) return std::nullopt;
  if (rd.at > msg.size()) return std::nullopt;
  base::ByteReader r(msg);
  WireName n;
  if (!r.seek(rd.at) || read_name(r, &n)) return std::nullopt;
  return n;
}

}  // namespace abox::dns
