#include "engine/instance/guest_environment.h"

#include <algorithm>

namespace abox::engine {
namespace {

void set(std::vector<guest::EnvEntry>& env, std::string name, std::string value) {
  auto it = std::find_if(env.begin(), env.end(), [&](const guest::EnvEntry& e) { return e.name == name; });
  if (it != env.end()) {
    it->value = std::move(value);
  } else {
    env.push_back({std::move(name), std::move(value)});
  }
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || name.size() > guest::kMaxShortText) return false;
  if (name[0] >= '0' && name[0] <= '9') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

base::Result<guest::EnvEntry, std::string> parse_env_assignment(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos) return base::Err{"--env " + std::string(text) + ": expected NAME=VALUE"};
  auto name = text.substr(0, eq);
  if (!valid_env_name(name))
    return base::Err{"--env " + std::string(text) +
                     ": the name must be letters, digits and _, not starting with a digit"};
  auto value = text.substr(eq + 1);
  if (value.find('\0') != std::string_view::npos)
    return base::Err{"--env " + std::string(name) + ": a NUL in the value"};
  return guest::EnvEntry{std::string(name), std::string(value)};
}

base::Result<std::vector<guest::EnvEntry>, std::string> build_guest_environment(
    const GuestEnvironmentInput& in) {
  std::vector<guest::EnvEntry> env;
  set(env, "PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin");
  set(env, "HOME", std::string(kGuestHome));
  set(env, "USER", "agent");
  set(env, "LOGNAME", "agent");
  set(env, "SHELL", "/bin/sh");
  // npm packages an image adds (--add-npm) are global: Node finds them here.
  set(env, "NODE_PATH", "/usr/local/lib/node_modules");
  set(env, "TERM", in.term.empty() ? "dumb" : in.term);
  set(env, "LANG", in.lang.empty() ? "C.UTF-8" : in.lang);
  for (const auto& n : in.nonces) set(env, n.env, n.nonce);
  if (in.has_ca) {
    set(env, "SSL_CERT_FILE", std::string(kGuestCaBundle));
    set(env, "REQUESTS_CA_BUNDLE", std::string(kGuestCaBundle));
    set(env, "CURL_CA_BUNDLE", std::string(kGuestCaBundle));
    set(env, "NODE_EXTRA_CA_CERTS", std::string(kGuestCaFile));
  }
  for (const auto& u : in.user) {
    bool is_nonce = std::any_of(in.nonces.begin(), in.nonces.end(),
                                [&](const NonceVariable& n) { return n.env == u.name; });
    if (is_nonce) {
      return base::Err{"--env " + u.name +
                       ": the policy's [[broker]] binding puts this instance's nonce there; the " +
                       "guest must send the nonce, and the broker adds the key on the host"};
    }
    set(env, u.name, u.value);
  }
  return env;
}

base::Result<void, std::string> check_no_key(const std::vector<guest::EnvEntry>& env,
                                             const std::vector<std::string>& argv,
                                             const std::vector<std::string_view>& keys) {
  for (auto key : keys) {
    if (key.empty()) continue;
    for (const auto& e : env) {
      if (e.value.find(key) != std::string::npos || e.name.find(key) != std::string::npos) {
        return base::Err{"the environment variable " + e.name +
                         " holds a key from the credentials file: keys never enter the guest (its binding's "
                         "nonce does, and the broker swaps it on the host)"};
      }
    }
    for (std::size_t i = 0; i < argv.size(); ++i) {
      if (argv[i].find(key) != std::string::npos) {
        return base::Err{"argument " + std::to_string(i) +
                         " of the command holds a key from the credentials file: keys never enter the guest"};
      }
    }
  }
  return {};
}

}  // namespace abox::engine
