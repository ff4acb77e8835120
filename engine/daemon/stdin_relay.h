// StdinRelay: the shim's side of `abox attach`'s input. It listens on
// ROOT/NAME/shim.sock (0600; a peer of another uid is closed at once) and
// copies what its one client sends into the command's stdin pipe, with the
// pipe's own backpressure (a full pipe stops the reading of the socket).
// The client's EOF closes the pipe: the command reads EOF. A second client
// while one is connected is closed at once. Bytes pass through unread.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <optional>
#include <string>

#include "base/unique_fd.h"

namespace abox::engine {

class StdinRelay {
 public:
  StdinRelay(boost::asio::io_context& io, std::string socket_path, base::UniqueFd pipe_write);
  StdinRelay(const StdinRelay&) = delete;
  StdinRelay& operator=(const StdinRelay&) = delete;
  ~StdinRelay();

 private:
  void accept();
  void read();
  void close_pipe();

  std::string path_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::optional<boost::asio::local::stream_protocol::socket> client_;
  boost::asio::posix::stream_descriptor pipe_;
  std::array<std::uint8_t, 16384> buffer_{};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
