#include "engine/daemon/stdin_relay.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/write.hpp>
#include <iostream>

namespace abox::engine {

using boost::asio::local::stream_protocol;

StdinRelay::StdinRelay(boost::asio::io_context& io, std::string socket_path, base::UniqueFd pipe_write)
    : path_(std::move(socket_path)), acceptor_(io), pipe_(io, pipe_write.release()) {
  ::unlink(path_.c_str());
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  mode_t old = ::umask(0177);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path_), ec);
  ::umask(old);
  if (!ec) acceptor_.listen(2, ec);
  if (ec) {
    std::cerr << "abox shim: " << path_ << ": " << ec.message() << " (no stdin for abox attach)\n";
    return;
  }
  accept();
}

StdinRelay::~StdinRelay() {
  *alive_ = false;
  ::unlink(path_.c_str());
}

void StdinRelay::accept() {
  acceptor_.async_accept([this, alive = alive_](const boost::system::error_code& ec,
                                                stream_protocol::socket s) {
    if (!*alive || ec) return;
    ucred peer{};
    socklen_t len = sizeof peer;
    bool mine =
        ::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.uid == ::getuid();
    if (mine && !client_ && pipe_.is_open()) {
      client_.emplace(std::move(s));
      read();
    }
    accept();  // a refused or second client's socket closes here
  });
}

void StdinRelay::read() {
  client_->async_read_some(boost::asio::buffer(buffer_),
                           [this, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
                             if (!*alive) return;
                             if (ec) {
                               // The client's EOF is the command's EOF.
                               client_.reset();
                               if (ec == boost::asio::error::eof) close_pipe();
                               return;
                             }
                             boost::asio::async_write(
                                 pipe_, boost::asio::buffer(buffer_.data(), n),
                                 [this, alive](const boost::system::error_code& wec, std::size_t) {
                                   if (!*alive) return;
                                   if (wec) {
                                     client_.reset();  // the command closed its stdin
                                     close_pipe();
                                     return;
                                   }
                                   if (client_) read();
                                 });
                           });
}

void StdinRelay::close_pipe() {
  boost::system::error_code ignored;
  pipe_.close(ignored);
  acceptor_.close(ignored);
  ::unlink(path_.c_str());
}

}  // namespace abox::engine
