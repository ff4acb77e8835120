// ExecRelay: the daemon's side of one `abox exec` (docs/api.md, "exec"):
// one connection to the instance's api.sock (its shim, which owns the
// control channel), relaying its lines (engine/instance/exec_wire.h) to the
// API client with the request's id, and the client's input to it.
//
//   shim -> client: the first line ({"ok":...}) becomes the answer to the
//     exec request; every later line is passed on as it is, with "id" put
//     first; the one with "done" is the last (then the relay closes). The
//     next line is read only while the client's queue is under its bound
//     (kMaxQueuedBytes): a client that does not read stops the shim's
//     writes, so the guest's command waits for credit. Each line must be
//     one JSON object of at most kMaxExecLine bytes (the shim is ours; a
//     line that is not is the shim broken, and ends the exec with an error).
//   client -> shim: one input line at a time (busy() while one is on its
//     way); done() runs once it is written.
// close() (the client went away, or the daemon stops): the shim sees EOF and
// kills the command.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace abox::engine {

class ExecRelay : public std::enable_shared_from_this<ExecRelay> {
 public:
  struct Client {
    std::function<void(std::string line)> send;  // one whole line, newline included
    std::function<std::size_t()> queued;         // bytes waiting to go to the client
    std::function<bool()> gone;
  };
  // request_line: "ABOX-EXEC/1 {...}\n". on_end runs once, when the relay is over.
  ExecRelay(boost::asio::io_context& io, std::uint64_t id, Client client, std::function<void()> on_end);
  void start(const std::string& api_socket, std::string request_line);

  bool busy() const { return writing_; }
  // Writes one line to the shim; done("") once written, done(error) if it cannot be.
  void input(std::string line, std::function<void(const std::string& error)> done);
  void close();

 private:
  void read_line();
  void on_line(std::string_view line);
  void finish(const std::string& error_line);  // the last message to the client, then close

  std::uint64_t id_;
  Client client_;
  std::function<void()> on_end_;
  boost::asio::local::stream_protocol::socket socket_;
  boost::asio::steady_timer wait_;
  std::string in_;
  std::string out_;
  bool accepted_ = false;
  bool writing_ = false;
  bool over_ = false;
};

}  // namespace abox::engine
