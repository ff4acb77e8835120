#include "engine/instance/exec_client.h"

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include "engine/instance/exec_wire.h"

namespace abox::engine {

ExecClient::ExecClient(boost::asio::local::stream_protocol::socket socket, std::string pending,
                       bool stdin_open)
    : socket_(std::move(socket)), in_(std::move(pending)), stdin_open_(stdin_open) {}

void ExecClient::start(ExecMultiplexer& mux, std::uint32_t id) {
  mux_ = &mux;
  id_ = id;
  queue(exec_accepted_line(id));
  take_lines();
}

void ExecClient::refuse(const std::string& error) {
  ended_ = true;
  queue(exec_refused_line(error));
  take_lines();  // what the client sends meanwhile is dropped, until it closes
}

void ExecClient::abandon() {
  mux_ = nullptr;
  ended_ = true;
  if (out_.empty() && !writing_) close();
}

void ExecClient::close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void ExecClient::take_lines() {
  // Lines already buffered first; a stdin line with the multiplexer holds the rest.
  while (!stdin_busy_ && !closed_) {
    auto nl = in_.find('\n');
    if (nl == std::string::npos) return read_line();
    std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    // After the end, what the client still sends is read and dropped until it closes
    // (closing with its bytes unread could cost it our last line).
    if (ended_ || mux_ == nullptr) continue;
    auto input = parse_exec_input(line);
    if (!input.ok()) {
      // The daemon is our only client and speaks this exactly: anything else ends the exec.
      ExecEnd e;
      e.error = "a malformed exec line from the client: " + input.error();
      mux_->detach(id_);
      mux_ = nullptr;
      ended_ = true;
      queue(exec_end_line(e));
      continue;
    }
    switch (input->kind) {
      case ExecInput::Kind::kStdin:
        if (!stdin_open_) break;  // no -i: the command's stdin is /dev/null
        stdin_busy_ = true;
        mux_->write_stdin(id_, std::move(input->data));  // may call exec_stdin_taken() at once
        break;
      case ExecInput::Kind::kEof:
        mux_->close_stdin(id_);
        break;
      case ExecInput::Kind::kResize:
        mux_->resize(id_, input->window.rows, input->window.cols);
        break;
      case ExecInput::Kind::kSignal:
        mux_->signal(id_, input->signo);
        break;
    }
  }
}

void ExecClient::read_line() {
  if (reading_ || closed_) return;
  reading_ = true;
  boost::asio::async_read_until(
      socket_, boost::asio::dynamic_buffer(in_, kMaxExecLine + 1), '\n',
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        self->reading_ = false;
        if (ec) return self->gone();
        self->take_lines();
      });
}

void ExecClient::gone() {
  // EOF, a broken socket, or a line over the bound: the client is gone.
  if (!ended_ && mux_ != nullptr) mux_->detach(id_);
  mux_ = nullptr;
  ended_ = true;
  peer_closed_ = true;
  if (out_.empty() && !writing_) close();
}

void ExecClient::exec_stdin_taken() {
  if (!stdin_busy_) return;
  stdin_busy_ = false;
  if (!reading_) take_lines();
}

void ExecClient::exec_started(std::uint32_t pid) {
  queue(exec_started_line(pid));
}

void ExecClient::exec_output(bool is_stderr, std::span<const std::uint8_t> bytes,
                             std::function<void()> written) {
  queue(exec_output_line(is_stderr, bytes), std::move(written));
}

void ExecClient::exec_ended(const ExecEnd& end) {
  ended_ = true;
  mux_ = nullptr;  // the multiplexer forgot this exec
  queue(exec_end_line(end));
  if (stdin_busy_) {
    stdin_busy_ = false;
    if (!reading_) take_lines();
  }
}

void ExecClient::queue(std::string line, std::function<void()> written) {
  if (closed_) {
    if (written) written();  // nobody reads it: the guest may go on
    return;
  }
  out_.push_back({std::move(line), std::move(written)});
  if (!writing_) write_next();
}

void ExecClient::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (ended_ && !closed_) {
      // The end is out: nothing more from us. The client closes its side then.
      boost::system::error_code ignored;
      socket_.shutdown(boost::asio::socket_base::shutdown_send, ignored);
      if (peer_closed_) close();
    }
    return;
  }
  writing_ = true;
  boost::asio::async_write(socket_, boost::asio::buffer(out_.front().text),
                           [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                             auto written = std::move(self->out_.front().written);
                             self->out_.pop_front();
                             if (written) written();
                             if (ec) {
                               // The client is gone: what is queued is dropped (its credit still goes back).
                               self->writing_ = false;
                               self->close();
                               while (!self->out_.empty()) {
                                 auto w = std::move(self->out_.front().written);
                                 self->out_.pop_front();
                                 if (w) w();
                               }
                               if (!self->ended_ && self->mux_ != nullptr) self->mux_->detach(self->id_);
                               self->mux_ = nullptr;
                               self->ended_ = true;
                               return;
                             }
                             self->write_next();
                           });
}

}  // namespace abox::engine
