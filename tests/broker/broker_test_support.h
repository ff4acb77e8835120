// Helpers for the broker's unit tests (nonce_test.cc, injection_gate_test.cc):
// a Policy from TOML text, and an instance secret of one repeated byte (two
// fills, two instances).
//
// Invariants: load() fails the calling test, with the parser's message, on
// text that does not parse.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string_view>
#include <utility>

#include "broker/nonce.h"
#include "policy/policy_file.h"

namespace abox::broker::broker_test {

inline policy::Policy load(std::string_view text) {
  auto r = policy::parse_policy(text, "test.toml");
  if (!r.ok()) ADD_FAILURE() << r.error().to_string();
  return std::move(r).value();
}

inline InstanceSecretBytes secret_of(std::uint8_t fill) {
  InstanceSecretBytes s{};
  s.fill(fill);
  return s;
}

}  // namespace abox::broker::broker_test
