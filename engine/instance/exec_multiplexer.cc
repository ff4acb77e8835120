#include "engine/instance/exec_multiplexer.h"

#include <signal.h>

#include <algorithm>

namespace abox::engine {

ExecMultiplexer::ExecMultiplexer(ExecChannel& channel, std::size_t max_sessions, std::uint32_t output_credit)
    : channel_(channel), max_sessions_(max_sessions), output_credit_(output_credit) {}

ExecMultiplexer::~ExecMultiplexer() {
  *alive_ = false;
}

base::Result<std::uint32_t, std::string> ExecMultiplexer::open(ExecRequest request, ExecSink& sink) {
  if (execs_.size() >= max_sessions_)
    return base::Err{"this instance's shim serves at most " + std::to_string(max_sessions_) +
                     " exec sessions at once"};
  const std::uint32_t id = next_id_;
  guest::Exec m;
  m.session = id;
  m.env = std::move(request.env);
  m.workdir = std::move(request.workdir);
  m.uid = request.uid;
  m.gid = request.gid;
  m.argv = std::move(request.argv);
  m.output_credit = output_credit_;
  m.stdin_open = request.stdin_open;
  m.tty = request.tty;
  m.window = request.window;
  const bool stdin_open = request.stdin_open;
  if (!channel_.open_exec(m))
    return base::Err{std::string(
        "the exec does not fit one control message (64 KiB: its command and environment) or the channel is "
        "closed")};
  ++next_id_;
  execs_[id].sink = &sink;
  execs_[id].stdin_open = stdin_open;
  return id;
}

void ExecMultiplexer::write_stdin(std::uint32_t id, std::vector<std::uint8_t> bytes) {
  auto it = execs_.find(id);
  if (it == execs_.end()) return;
  Exec& e = it->second;
  if (!e.stdin_open || e.eof_pending) {
    // The command takes no stdin (or it was closed): nothing to send, nothing to wait for.
    if (e.sink != nullptr) e.sink->exec_stdin_taken();
    return;
  }
  // One batch at a time: the sink waits for exec_stdin_taken() before the next.
  e.stdin.insert(e.stdin.end(), bytes.begin(), bytes.end());
  e.stdin_batch = true;
  pump_stdin(id);
}

void ExecMultiplexer::close_stdin(std::uint32_t id) {
  auto it = execs_.find(id);
  if (it == execs_.end() || !it->second.stdin_open || it->second.eof_pending) return;
  it->second.eof_pending = true;
  pump_stdin(id);
}

void ExecMultiplexer::pump_stdin(std::uint32_t id) {
  auto it = execs_.find(id);
  if (it == execs_.end()) return;
  Exec& e = it->second;
  while (e.stdin_sent < e.stdin.size()) {
    const std::uint64_t credit = channel_.stdin_credit(id);
    if (credit == 0) return;  // on_stdin_credit() goes on
    const std::size_t n = static_cast<std::size_t>(
        std::min<std::uint64_t>({credit, e.stdin.size() - e.stdin_sent, guest::kMaxStreamBytes}));
    channel_.send_stdin(id, std::span(e.stdin).subspan(e.stdin_sent, n));
    e.stdin_sent += n;
  }
  e.stdin.clear();
  e.stdin_sent = 0;
  if (e.eof_pending && !e.eof_sent) {
    e.eof_sent = true;
    channel_.send_stdin_eof(id);
  }
  if (e.stdin_batch) {
    e.stdin_batch = false;
    if (e.sink != nullptr) e.sink->exec_stdin_taken();
  }
}

void ExecMultiplexer::resize(std::uint32_t id, std::uint16_t rows, std::uint16_t cols) {
  if (execs_.count(id) != 0) channel_.send_resize(id, rows, cols);
}

void ExecMultiplexer::signal(std::uint32_t id, int signo) {
  if (execs_.count(id) != 0) channel_.send_signal(id, signo);
}

void ExecMultiplexer::detach(std::uint32_t id) {
  auto it = execs_.find(id);
  if (it == execs_.end() || it->second.sink == nullptr) return;
  it->second.sink = nullptr;
  it->second.stdin.clear();
  it->second.stdin_sent = 0;
  // The exec belongs to its client: with the client gone, nobody reads it.
  channel_.send_signal(id, SIGKILL);
}

void ExecMultiplexer::on_started(const guest::Started& m) {
  auto it = execs_.find(m.session);
  if (it == execs_.end() || it->second.sink == nullptr) return;
  it->second.sink->exec_started(m.pid);
}

void ExecMultiplexer::on_output(std::uint32_t id, bool is_stderr, std::span<const std::uint8_t> bytes) {
  auto it = execs_.find(id);
  const auto n = static_cast<std::uint32_t>(bytes.size());
  if (it == execs_.end() || it->second.sink == nullptr) {
    channel_.grant_output(id, n);  // nobody reads it: the guest may go on to its end
    return;
  }
  it->second.sink->exec_output(is_stderr, bytes, [this, id, n, alive = alive_] {
    if (*alive) channel_.grant_output(id, n);
  });
}

void ExecMultiplexer::on_stdin_credit(std::uint32_t id) {
  pump_stdin(id);
}

void ExecMultiplexer::end(std::uint32_t id, const ExecEnd& e) {
  auto it = execs_.find(id);
  if (it == execs_.end()) return;
  ExecSink* sink = it->second.sink;
  execs_.erase(it);  // before the sink hears of it: it may go away in the call
  if (sink != nullptr) sink->exec_ended(e);
}

void ExecMultiplexer::on_start_failed(const guest::StartFailed& m) {
  ExecEnd e;
  e.start_failed = m;
  end(m.session, e);
}

void ExecMultiplexer::on_exited(const guest::Exited& m) {
  ExecEnd e;
  e.exit = m;
  end(m.session, e);
}

void ExecMultiplexer::close_all(const std::string& reason) {
  ExecEnd e;
  e.error = reason;
  while (!execs_.empty()) end(execs_.begin()->first, e);
}

}  // namespace abox::engine
