// Upstream head. How this works: one pass over the validated RequestHead's
// fields, copying each one the guest may send upstream into `out`, then the
// key header. Nothing here reads raw guest bytes: the parser already checked
// them, and this only concatenates its views.
#include "broker/upstream_head.h"

#include <openssl/mem.h>

#include <array>

namespace abox::broker {

namespace {

constexpr std::array<std::string_view, 4> kGuestCredentialHeaders = {
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "cookie",
};

constexpr std::array<std::string_view, 4> kHopByHopHeaders = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
};

}  // namespace

bool is_hop_by_hop_header(std::string_view name) {
  for (auto h : kHopByHopHeaders) {
    if (iequals(name, h)) return true;
  }
  return false;
}

bool is_guest_credential_header(std::string_view name) {
  for (auto h : kGuestCredentialHeaders) {
    if (iequals(name, h)) return true;
  }
  return false;
}

void write_upstream_head(const RequestHead& head, const KeyPlacement& placement, std::string_view key,
                         std::string& out) {
  out.append(head.method());
  out.push_back(' ');
  out.append(head.target());
  out.append(" HTTP/1.1\r\n");
  for (const auto& f : head.fields()) {
    if (is_guest_credential_header(f.name) || is_hop_by_hop_header(f.name) ||
        iequals(f.name, placement.header) || iequals(f.name, "accept-encoding") ||
        iequals(f.name, "sec-websocket-extensions")) {
      continue;
    }
    out.append(f.name);
    out.append(": ");
    out.append(f.value);
    out.append("\r\n");
  }
  if (head.wants_upgrade()) out.append("Connection: upgrade\r\n");
  // The scrubber must see what the guest will decode: no content coding.
  out.append("Accept-Encoding: identity\r\n");
  out.append(placement.header);
  out.append(": ");
  out.append(placement.prefix);
  out.append(key);
  out.append("\r\n\r\n");
}

void wipe_string(std::string& s) {
  // The whole capacity: an earlier, longer content may linger past size().
  s.resize(s.capacity());
  OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

}  // namespace abox::broker
