// DaemonClient: the CLI's side of the daemon's API (docs/api.md), blocking:
// one connection, requests with increasing ids, replies read line by line
// (a line of at most kMaxReplyBytes; a longer one, or one that is not a JSON
// object, is an error).
//
// connect(autostart) starts the daemon when none answers on daemon.sock:
// `abox daemon` detached (setsid, its stdio on daemon.log), then waits up to
// 10 s for the socket; it says so on err, once. Two clients racing to start
// it are fine: the second daemon finds the lock held and exits. Without
// autostart it makes nothing: no daemon folder is created when none exists.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::engine {

inline constexpr std::size_t kMaxReplyBytes = 64 << 20;

class DaemonClient {
 public:
  static base::Result<DaemonClient, std::string> connect(bool autostart, std::ostream& err);

  // Sends {"v":1,"id":N,"op":op, ...fields}; returns N.
  base::Result<std::uint64_t, std::string> send(std::string_view op, boost::json::object fields);
  // The next message of request id (messages of other ids are skipped).
  base::Result<boost::json::object, std::string> next(std::uint64_t id);
  // The next message of any request (a client with several requests in flight).
  base::Result<boost::json::object, std::string> next_any();
  int fd() const { return fd_.get(); }
  // True when a whole message is already buffered (next_any() will not block).
  bool buffered() const { return buffer_.find('\n') != std::string::npos; }
  // send, then its one reply; {"ok":false,"error":E} comes back as the error E.
  base::Result<boost::json::object, std::string> call(std::string_view op, boost::json::object fields);

 private:
  explicit DaemonClient(base::UniqueFd fd) : fd_(std::move(fd)) {}
  base::UniqueFd fd_;
  std::string buffer_;
  std::uint64_t next_id_ = 1;
};

}  // namespace abox::engine
