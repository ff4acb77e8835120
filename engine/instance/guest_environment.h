// The command's environment in the guest, built on the host: box-guest adds
// nothing to it (docs/control-protocol.md), so what is checked here is what
// the agent gets.
//
//   PATH, HOME=/home/agent, USER and LOGNAME=agent, SHELL=/bin/sh,
//   NODE_PATH=/usr/local/lib/node_modules (where an image's --add-npm packages are),
//   TERM and LANG from the operator's (dumb and C.UTF-8 when unset),
//   each [[broker]] binding's nonce_env = its nonce,
//   with bindings, the CA variables: SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
//   CURL_CA_BUNDLE = /run/abox/ca-bundle.pem, NODE_EXTRA_CA_CERTS = /run/abox/ca.pem,
//   then every --env NAME=VALUE in order (a later one replaces an earlier one).
//
// check_no_key() refuses an environment or argv that holds any credential's
// key (a user passing --env OPENAI_API_KEY=sk-... by mistake): the key
// would reach the guest. The message names the variable, never the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "guest/protocol/messages.h"

namespace abox::engine {

inline constexpr std::string_view kGuestCaFile = "/run/abox/ca.pem";
inline constexpr std::string_view kGuestCaBundle = "/run/abox/ca-bundle.pem";
inline constexpr std::string_view kGuestHome = "/home/agent";

struct NonceVariable {
  std::string env;
  std::string nonce;
};

struct GuestEnvironmentInput {
  std::vector<NonceVariable> nonces;
  bool has_ca = false;
  std::string term;                   // the operator's TERM ("" when unset)
  std::string lang;                   // the operator's LANG ("" when unset)
  std::vector<guest::EnvEntry> user;  // --env, in order
};

// Fails when a --env entry would replace a nonce variable (the nonce is how
// the broker knows the request; the message says so).
base::Result<std::vector<guest::EnvEntry>, std::string> build_guest_environment(
    const GuestEnvironmentInput& in);

// Fails, naming the variable or argument, when any key occurs in any value.
base::Result<void, std::string> check_no_key(const std::vector<guest::EnvEntry>& env,
                                             const std::vector<std::string>& argv,
                                             const std::vector<std::string_view>& keys);

// "NAME=VALUE" → an entry; fails on a missing '=', an empty or invalid name.
base::Result<guest::EnvEntry, std::string> parse_env_assignment(std::string_view text);

}  // namespace abox::engine
