// What `abox policy apply` and `abox broker reload` send to a running
// abox-net or broker (the request itself: base/control_client.h): a
// policy's text, and the reload reply read back.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "base/control_client.h"
#include "base/result.h"

namespace abox::engine {

// One request and its reply: base/control_client.h.
using base::ask_control_socket;

// The text of a policy file to send (at most policy::kMaxPolicyFileBytes,
// load_policy()'s own bound; base/whole_file.h). Err: a message (the errno
// text, "it is a folder, not a file", "it is not a regular file", "larger
// than 4 MiB").
base::Result<std::string, std::string> read_policy_text(const std::string& path);

// A reload reply ("0\n...", "1\n...", "3\n..."): its status digit and the
// text after it (trailing newlines dropped). status is -1 for a reply of
// another shape.
struct ReloadReply {
  int status = -1;
  std::string text;
};
ReloadReply parse_reload_reply(std::string_view reply);

}  // namespace abox::engine
