// What the helper's tests share: the real abox-helper started as root, and
// client code run as an unprivileged operator in a forked child.
//
// The operator and the other user are bare uids with no passwd entry (the
// tests make no account on the machine); the helper is told the group.
// HelperProcess starts the program, waits (bounded) for its socket, and stops
// it with SIGTERM by its pid, returning its exit status; its log stays
// readable. as_uid() forks, drops to uid/gid in the child (no supplementary
// groups), runs the function there and hands back the string it returns; a
// child that dies returns "child died: ...". No GoogleTest assertion runs in
// a child.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace abox::testing {

inline constexpr uid_t kOperatorUid = 64123;
inline constexpr uid_t kOtherUid = 64124;
inline constexpr gid_t kOperatorGid = 64123;

class HelperProcess {
 public:
  // Starts `program` with --operator/--group/--socket and the extra args.
  HelperProcess(const std::string& program, const TempDir& dir, std::vector<std::string> extra)
      : socket_(dir.path() + "/h.sock"), log_(dir.path() + "/helper.log") {
    ::chmod(dir.path().c_str(), 0711);  // the operator must reach the socket inside
    std::vector<std::string> args = {
        program,    "--operator", std::to_string(kOperatorUid), "--group", std::to_string(kOperatorGid),
        "--socket", socket_};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ::dup2(log, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 250 && !ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ~HelperProcess() { stop(); }

  bool ready() const {
    struct stat st {};
    return ::stat(socket_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  }
  // SIGTERM, then its exit status (-1 when it was already stopped).
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;
  std::string log_;
  pid_t pid_ = -1;
};

// Drops to uid/gid for good (in a child).
inline bool drop_to(uid_t uid, gid_t gid) {
  return ::setgroups(0, nullptr) == 0 && ::setresgid(gid, gid, gid) == 0 && ::setresuid(uid, uid, uid) == 0;
}

template <class Fn>
std::string as_uid(uid_t uid, gid_t gid, Fn&& fn) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::string out = (uid == 0 || drop_to(uid, gid)) ? fn() : std::string("could not drop privileges");
    std::size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::write(p[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child died: status " + std::to_string(status);
  return out;
}

}  // namespace abox::testing
