// TarJob (see tar_job.h).
#include "guest/box_guest/tar_job.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::guest {
namespace {

constexpr int kMaxReadsPerCall = 16;

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > kMaxShortText) line.resize(kMaxShortText);
  return line;
}

}  // namespace

std::vector<std::string> TarJob::create_argv(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::string dir = "/", base = ".";
  if (p != "/") {
    const auto slash = p.rfind('/');
    dir = slash == 0 ? "/" : p.substr(0, slash);
    base = p.substr(slash + 1);
  }
  // "--": a name that starts with '-' is a name, not an option.
  return {"tar", "-c", "-f", "-", "-C", dir, "--", base};
}

base::Result<TarJob, std::string> TarJob::extract(const std::string& dir, std::uint32_t uid,
                                                  std::uint32_t gid) {
  CommandSpec spec;
  spec.argv = {"tar", "-x", "-f", "-"};  // in dir, which the child made and entered
  spec.workdir = dir;
  spec.make_workdir = true;
  spec.uid = uid;
  spec.gid = gid;
  spec.stdin_open = true;
  return start(std::move(spec), false);
}

base::Result<TarJob, std::string> TarJob::create(const std::string& path, std::uint32_t uid,
                                                 std::uint32_t gid) {
  CommandSpec spec;
  spec.argv = create_argv(path);
  spec.workdir = "/";
  spec.uid = uid;
  spec.gid = gid;
  return start(std::move(spec), true);
}

base::Result<TarJob, std::string> TarJob::start(CommandSpec spec, bool stream_out) {
  spec.env = {{"PATH", kTarPath}, {"LC_ALL", "C"}};
  TarJob job;
  job.what_ = stream_out ? "tar -c of " + spec.argv[5] + "/" + spec.argv[7] : "tar -x into " + spec.workdir;
  auto launched = launch_command(spec);
  if (!launched.ok()) return base::Err{job.what_ + ": " + launched.error().detail};
  job.command_ = std::move(*launched);
  if (stream_out) {
    job.stream_ = std::move(job.command_.stdout_read);
  } else {
    job.diagnostics_b_ = std::move(job.command_.stdout_read);
  }
  job.diagnostics_a_ = std::move(job.command_.stderr_read);
  job.spec_ = std::move(spec);
  return job;
}

void TarJob::read_diagnostics(base::UniqueFd& fd) {
  char buf[4096];
  for (int i = 0; i < kMaxReadsPerCall && fd; ++i) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      fd.reset();
      return;
    }
    const std::size_t room = kDiagnosticBytes - diagnostics_.size();
    diagnostics_.append(buf, std::min(room, static_cast<std::size_t>(n)));
  }
}

void TarJob::read_start_status() {
  std::uint8_t buf[kStartStatusBytes + 1];
  for (int i = 0; i < kMaxReadsPerCall && command_.start_status; ++i) {
    ssize_t n = ::read(command_.start_status.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) {
      start_status_bytes_.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
      if (start_status_bytes_.size() > kStartStatusBytes + 1)
        start_status_bytes_.resize(kStartStatusBytes + 1);
      continue;
    }
    command_.start_status.reset();
    start_known_ = true;
    if (start_status_bytes_.empty()) return;
    auto decoded = decode_start_status(std::span(
        reinterpret_cast<const std::uint8_t*>(start_status_bytes_.data()), start_status_bytes_.size()));
    StartFailed f;
    f.reason = decoded ? decoded->reason : StartFailure::kOther;
    f.error = decoded ? decoded->error : EPROTO;
    start_failed_ = f;
  }
}

bool TarJob::over() const {
  return wait_status_ && start_known_ && !diagnostics_a_ && !diagnostics_b_;
}

CopyResult TarJob::result() const {
  CopyResult r;
  if (start_failed_) {
    switch (start_failed_->reason) {
      case StartFailure::kWorkdir:
        r.detail = "cannot make or enter " + spec_.workdir + " as uid " + std::to_string(spec_.uid) + ": ";
        break;
      case StartFailure::kNotFound:
        r.detail = "no tar in the image (" + std::string(kTarPath) + "): ";
        break;
      default:
        r.detail = what_ + " did not start: ";
        break;
    }
    r.detail += std::strerror(start_failed_->error);
  } else if (wait_status_ && WIFEXITED(*wait_status_) && WEXITSTATUS(*wait_status_) == 0) {
    r.ok = true;
    r.detail = first_line(diagnostics_);
  } else {
    std::string how = "ended";
    if (wait_status_ && WIFEXITED(*wait_status_))
      how = "exited " + std::to_string(WEXITSTATUS(*wait_status_));
    if (wait_status_ && WIFSIGNALED(*wait_status_))
      how = "died of signal " + std::to_string(WTERMSIG(*wait_status_));
    r.detail = first_line(diagnostics_);
    if (r.detail.empty()) r.detail = what_ + " " + how;
  }
  if (r.detail.size() > kMaxShortText) r.detail.resize(kMaxShortText);
  return r;
}

}  // namespace abox::guest
