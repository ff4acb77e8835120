#include "engine/cli/control_request.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace abox::engine {

namespace {

constexpr std::size_t kMaxPolicyText = 4u << 20;

}  // namespace

base::Result<std::string, std::string> read_policy_text(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return base::Err{std::string(std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return base::Err{std::string("not a regular file")};
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Err{std::string(std::strerror(errno))};
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxPolicyText) return base::Err{std::string("larger than 4 MiB")};
  }
}

ReloadReply parse_reload_reply(std::string_view reply) {
  ReloadReply r;
  if (reply.size() < 2 || reply[1] != '\n' || reply[0] < '0' || reply[0] > '9') {
    r.text = std::string(reply);
  } else {
    r.status = reply[0] - '0';
    r.text = std::string(reply.substr(2));
  }
  while (!r.text.empty() && r.text.back() == '\n') r.text.pop_back();
  return r;
}

}  // namespace abox::engine
