// ExecClient: one `abox exec` on the instance's api.sock (exec_wire.h has
// the lines), as the ExecSink of its exec in the ExecMultiplexer.
//
// Each way, backpressure end to end:
//   - output: each chunk is one line queued to the socket; the chunk's
//     credit goes back to the guest when its line is written (so a client
//     that does not read stops its own command, nothing else);
//   - input: one line read at a time; a stdin line is handed to the
//     multiplexer and the next line is read only once it said the bytes are
//     on their way (exec_stdin_taken), so the shim holds one line at most.
// The end line goes after every output line; then our side is shut down,
// and what the client still sends is read and dropped until it closes.
// The client's EOF (or a broken socket) before the end: the multiplexer
// detaches the exec (its command is killed) and the socket closes.
//
// Lifetime: the owner (the supervisor) holds it until closed() (its
// pending reads and writes hold it too): the multiplexer keeps a plain
// pointer to it while its exec is open, and a client waiting for stdin
// credit has nothing pending. The owner calls abandon() when the multiplexer
// goes away first; no call reaches it after.
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "engine/instance/exec_multiplexer.h"

namespace abox::engine {

class ExecClient final : public ExecSink, public std::enable_shared_from_this<ExecClient> {
 public:
  // `pending`: what the socket already sent after the request line.
  ExecClient(boost::asio::local::stream_protocol::socket socket, std::string pending, bool stdin_open);
  ExecClient(const ExecClient&) = delete;
  ExecClient& operator=(const ExecClient&) = delete;

  // After a successful open: says so and starts reading the client's lines.
  void start(ExecMultiplexer& mux, std::uint32_t id);
  // The open failed: the refusal line, then the socket closes.
  void refuse(const std::string& error);
  // The multiplexer is going away: no call into it from now on.
  void abandon();
  // The socket is closed and the multiplexer forgot the exec: the owner may let it go.
  bool closed() const { return closed_ && mux_ == nullptr; }

  // ExecSink
  void exec_started(std::uint32_t pid) override;
  void exec_output(bool is_stderr, std::span<const std::uint8_t> bytes,
                   std::function<void()> written) override;
  void exec_stdin_taken() override;
  void exec_ended(const ExecEnd& end) override;

 private:
  void read_line();
  void take_lines();
  void queue(std::string line, std::function<void()> written = nullptr);
  void write_next();
  void gone();  // the client left: detach, close once what is queued is out
  void close();

  struct Line {
    std::string text;
    std::function<void()> written;
  };
  boost::asio::local::stream_protocol::socket socket_;
  std::string in_;
  std::deque<Line> out_;
  ExecMultiplexer* mux_ = nullptr;
  std::uint32_t id_ = 0;
  bool stdin_open_;
  bool reading_ = false;
  bool writing_ = false;
  bool stdin_busy_ = false;  // a stdin line is with the multiplexer
  bool ended_ = false;       // the end line is queued: nothing more to the multiplexer
  bool peer_closed_ = false;
  bool closed_ = false;
};

}  // namespace abox::engine
