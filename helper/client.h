// HelperClient: the daemon's side of abox-helper (docs/helper.md).
//
// One connection; each call sends one request and waits for its reply, at
// most `timeout` (SO_SNDTIMEO/SO_RCVTIMEO), so a call blocks the caller
// briefly: the engine calls it for setup and teardown, never on a data path.
// Every field is checked here with the helper's own rules before anything is
// sent, so a caller's mistake comes back at once with the same error the
// helper would give. A reply that does not parse, or a connection that
// closes, is kProtocol/kUnreachable, and the client is unusable afterwards.
//
// Not thread-safe; move-only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"
#include "helper/wire.h"

namespace abox::helper {

struct HelperError {
  enum class Kind {
    kUnreachable,  // no helper on the socket, or it went away
    kProtocol,     // the reply broke the wire format
    kRefused,      // the helper (or the client's own check) answered an error: see code
  };
  Kind kind = Kind::kUnreachable;
  ErrorCode code = ErrorCode::kSystem;  // for kRefused
  std::string message;

  // One line: "helper: bad-name: instance name 'a/b': '/' is not allowed ..."
  std::string to_string() const;
};

struct HelloInfo {
  bool cgroups = false;  // the helper can make cgroups on this host
};

// Where the helper of operator `uid` listens: $ABOX_HELPER_SOCKET, else
// /run/abox/helper-UID.sock.
std::string helper_socket_path(uid_t uid);

class HelperClient {
 public:
  static base::Result<HelperClient, HelperError> connect(
      const std::string& socket_path, std::chrono::milliseconds timeout = std::chrono::seconds(10));

  base::Result<HelloInfo, HelperError> hello();
  base::Result<void, HelperError> create_cgroup(std::string_view instance, const CgroupLimits& limits);
  base::Result<void, HelperError> move_into_cgroup(std::string_view instance, std::span<const pid_t> pids);
  base::Result<void, HelperError> delete_cgroup(std::string_view instance);
  // netns_fd: the network namespace (for instance open("/proc/PID/ns/net")); it stays the caller's.
  base::Result<void, HelperError> create_tap(std::string_view tap, int netns_fd);
  base::Result<void, HelperError> delete_tap(std::string_view tap, int netns_fd);

  // Sends bytes as they are (with fds) and returns the reply: for tests of the helper's refusals.
  base::Result<Reply, HelperError> exchange_raw(std::string_view bytes, std::span<const int> fds);

 private:
  explicit HelperClient(base::UniqueFd fd) : fd_(std::move(fd)) {}
  base::Result<void, HelperError> call(const Request& request, std::span<const int> fds,
                                       std::string* ok_text);

  base::UniqueFd fd_;
};

}  // namespace abox::helper
