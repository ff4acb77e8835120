// Session: files in and out (docs/control-protocol.md, "Files in and out").
//
// copy_in (after setup, before go; one at a time): tar -x as the command's
// user into the path, made first (tar_job.h). Each copy_data frame is held
// until tar's stdin has taken all of it, and while it is held the control
// port is not read (copy_in_blocked()), so the host's writes wait: one
// frame is all box-guest ever holds. copy_end closes tar's stdin once that
// frame is gone. If tar stops reading early (it failed), what still comes
// is counted and dropped until copy_end. copy_in_done goes when copy_end
// came and tar is over: ok when tar exited 0, with the first line it
// printed.
//
// copy_out (after setup, until poweroff; one at a time): tar -c as the
// command's user. Its stdout is read only within the copy credit (which
// belongs to the open copy_out: it starts at 0, copy_credit adds to it, and
// what is left goes with copy_out_done) and while the output queue is below
// its high-water mark, into copy_out_data frames; copy_out_done follows the
// stream's end and tar's. The command's output is read beside it under its
// own credit.
//
// A copy_in that cannot be taken (after go, or a path that does not
// decode) is answered with copy_in_done ok 0 at once, so a host waiting for
// it is not left hanging; a copy_in or copy_out while another of its kind
// is open, and copy_data, copy_end or copy_credit with none open, are
// logged and ignored.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "guest/box_guest/console.h"
#include "guest/box_guest/process_sweep.h"
#include "guest/box_guest/session.h"

namespace abox::guest {

bool Session::copy_in_blocked() const {
  return copy_in_ && copy_in_->head < copy_in_->pending.size();
}

void Session::copy_in_done(const CopyResult& r) {
  console_line(std::string("copy_in ") + (r.ok ? "done" : "failed") +
               (r.detail.empty() ? "" : ": " + r.detail));
  send_message(GuestMessage::kCopyInDone, r);
}

void Session::copy_out_done(const CopyResult& r) {
  console_line(std::string("copy_out ") + (r.ok ? "done" : "failed") +
               (r.detail.empty() ? "" : ": " + r.detail));
  send_message(GuestMessage::kCopyOutDone, r);
}

void Session::on_copy_in(std::span<const std::uint8_t> payload) {
  auto path = decode_copy_path(payload);
  if (copy_in_) return log("a copy_in while another is open: ignored");
  if (!path) return copy_in_done({false, "copy_in: the path does not decode (absolute, at most 4096 bytes)"});
  if (phase_ != Phase::kSelftest && phase_ != Phase::kAwaitGo)
    return copy_in_done({false, "copy_in while " + phase_name() + ": only before go"});
  auto tar = TarJob::extract(path->path, spec_.uid, spec_.gid);
  if (!tar.ok()) return copy_in_done({false, tar.error().substr(0, kMaxShortText)});
  console_line("copy_in to " + path->path);
  copy_in_.emplace(CopyIn{std::move(*tar), {}, 0, false, 0, 0});
}

void Session::on_copy_data(std::span<const std::uint8_t> payload) {
  if (!copy_in_ || copy_in_->end_received) return log("copy_data with no copy_in open: dropped");
  CopyIn& c = *copy_in_;
  c.received += payload.size();
  if (!c.tar.input()) {
    c.discarded += payload.size();
    return;
  }
  c.pending.assign(payload.begin(), payload.end());
  c.head = 0;
  write_copy_in();  // most of it usually goes at once; the rest waits for POLLOUT
}

void Session::on_copy_end(std::span<const std::uint8_t> payload) {
  if (!decode_empty(payload)) return log("a copy_end with a payload: ignored");
  if (!copy_in_ || copy_in_->end_received) return log("copy_end with no copy_in open: ignored");
  copy_in_->end_received = true;
  if (!copy_in_blocked()) copy_in_->tar.input().reset();  // EOF for tar
}

void Session::write_copy_in() {
  CopyIn& c = *copy_in_;
  base::UniqueFd& input = c.tar.input();
  while (input && c.head < c.pending.size()) {
    ssize_t n = ::write(input.get(), c.pending.data() + c.head, c.pending.size() - c.head);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      // EPIPE: tar stopped reading (it failed, and will say why). The rest is dropped.
      console_line(std::string("copy_in: tar's stdin: ") + std::strerror(errno));
      c.discarded += c.pending.size() - c.head;
      input.reset();
      break;
    }
    c.head += static_cast<std::size_t>(n);
  }
  c.pending.clear();
  c.head = 0;
  if (c.end_received) input.reset();
}

void Session::on_copy_out(std::span<const std::uint8_t> payload) {
  auto path = decode_copy_path(payload);
  if (copy_out_) return log("a copy_out while another is open: ignored");
  if (!path)
    return copy_out_done({false, "copy_out: the path does not decode (absolute, at most 4096 bytes)"});
  auto tar = TarJob::create(path->path, spec_.uid, spec_.gid);
  if (!tar.ok()) return copy_out_done({false, tar.error().substr(0, kMaxShortText)});
  console_line("copy_out of " + path->path);
  copy_out_.emplace(CopyOut{std::move(*tar), OutputCredit{0}, 0});
}

void Session::on_copy_credit(std::span<const std::uint8_t> payload) {
  auto credit = decode_credit(payload);
  if (!credit) return log("a copy_credit that does not decode: ignored");
  if (!copy_out_) return log("copy_credit with no copy_out open: ignored");
  copy_out_->credit.grant(credit->bytes);
}

void Session::read_copy_out() {
  CopyOut& c = *copy_out_;
  std::size_t want = c.credit.allowance(kMaxPayload);
  if (want == 0) return;
  std::vector<std::uint8_t> chunk(want);
  ssize_t n = ::read(c.tar.stream().get(), chunk.data(), chunk.size());
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    c.tar.stream().reset();
    return;
  }
  chunk.resize(static_cast<std::size_t>(n));
  c.credit.spend(chunk.size());
  c.sent += chunk.size();
  send(GuestMessage::kCopyOutData, chunk);
}

bool Session::reap_copy(pid_t pid, int status) {
  for (TarJob* tar : {copy_in_ ? &copy_in_->tar : nullptr, copy_out_ ? &copy_out_->tar : nullptr}) {
    if (tar != nullptr && tar->pid() == pid && !tar->reaped()) {
      tar->exited(status);
      return true;
    }
  }
  return false;
}

void Session::settle_copies() {
  bool ended_one = false;
  if (copy_in_ && copy_in_->end_received && !copy_in_->tar.input() && copy_in_->tar.over()) {
    CopyResult r = copy_in_->tar.result();
    if (copy_in_->discarded > 0 && r.ok) {
      r.ok = false;  // cannot happen with a tar that read to the end; never say ok for a partial stream
      r.detail = "tar stopped reading before the stream's end";
    }
    console_line("copy_in: " + std::to_string(copy_in_->received) + " bytes, " +
                 std::to_string(copy_in_->discarded) + " dropped");
    copy_in_.reset();
    copy_in_done(r);
    ended_one = true;
    if (go_pending_) {
      go_pending_ = false;
      start_command();
    }
  }
  if (copy_out_ && !copy_out_->tar.stream() && copy_out_->tar.over()) {
    CopyResult r = copy_out_->tar.result();
    console_line("copy_out: " + std::to_string(copy_out_->sent) + " bytes");
    copy_out_.reset();
    copy_out_done(r);
    ended_one = true;
  }
  // The command's main process exited while a tar was spared from the sweep
  // and something still holds its output open: sweep again, now sparing the rest.
  CommandSession* main = commands_.main();
  if (ended_one && main != nullptr && main->reaped() && main->state() == CommandSession::State::kRunning &&
      ::getpid() == 1 && main->output_open())
    kill_leftovers();
}

}  // namespace abox::guest
