// Base64 (RFC 4648, with padding) for the API's byte streams: an agent's
// output is any bytes, and JSON strings carry only text. decode refuses
// anything that is not canonical base64 (wrong length, a byte outside the
// alphabet, padding in the middle).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace abox::engine {

std::string base64_encode(std::span<const std::uint8_t> bytes);
std::optional<std::vector<std::uint8_t>> base64_decode(std::string_view text);

}  // namespace abox::engine
