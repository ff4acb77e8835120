#include "engine/cli/control_request.h"

#include <utility>

#include "base/whole_file.h"
#include "policy/policy_file.h"

namespace abox::engine {

base::Result<std::string, std::string> read_policy_text(const std::string& path) {
  auto text = base::read_whole_file(path, policy::kMaxPolicyFileBytes);
  if (!text.ok()) return base::Err{text.error().message};
  return std::move(text).value();
}

ReloadReply parse_reload_reply(std::string_view reply) {
  ReloadReply r;
  if (reply.size() < 2 || reply[1] != '\n' || reply[0] < '0' || reply[0] > '9') {
    r.text = std::string(reply);
  } else {
    r.status = reply[0] - '0';
    r.text = std::string(reply.substr(2));
  }
  while (!r.text.empty() && r.text.back() == '\n') r.text.pop_back();
  return r;
}

}  // namespace abox::engine
