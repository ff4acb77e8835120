#include "netstack/program/stats_command.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "base/unique_fd.h"
#include "netstack/program/stats_reader.h"

namespace abox::netstack {

namespace {

constexpr std::string_view kUsage =
    "usage: abox-net stats PATH [--json]\n"
    "\n"
    "Prints the live counters of the abox-net (run or dns) that listens on the\n"
    "stats socket PATH (its --stats-socket): frames, every drop and refusal by\n"
    "reason, DNS, flows, memory in use.\n"
    "\n"
    "Options:\n"
    "  --json   print the JSON object as abox-net sent it (one line)\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 no answer (nothing listens at\n"
    "PATH, permission denied, timeout after 5 s) or an answer that is not\n"
    "abox-net's counters.\n";

constexpr std::size_t kMaxReply = 1 << 20;
constexpr int kTimeoutSeconds = 5;

// The whole reply (the server closes after it), or an error message.
std::optional<std::string> fetch(const std::string& path, std::string& error) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    error = "the socket path must be 1 to " + std::to_string(sizeof addr.sun_path - 1) + " bytes";
    return std::nullopt;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  timeval tv{kTimeoutSeconds, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    error = "cannot connect to " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string reply;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      error = (errno == EAGAIN || errno == EWOULDBLOCK)
                  ? "no answer from " + path + " within " + std::to_string(kTimeoutSeconds) + " s"
                  : "reading " + path + ": " + std::strerror(errno);
      return std::nullopt;
    }
    if (reply.size() + static_cast<std::size_t>(n) > kMaxReply) {
      error = "the answer from " + path + " is larger than 1 MiB";
      return std::nullopt;
    }
    reply.append(buf.data(), static_cast<std::size_t>(n));
  }
  return reply;
}

}  // namespace

int run_stats_command(std::span<const std::string_view> args) {
  std::optional<std::string> path;
  bool json = false;
  for (auto a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (!a.starts_with("-") && !path) {
      path = std::string(a);
    } else {
      std::cerr << "abox-net stats: unexpected argument '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  if (!path) {
    std::cerr << "abox-net stats: the stats socket PATH is required\n" << kUsage;
    return 2;
  }
  std::string error;
  auto reply = fetch(*path, error);
  if (!reply) {
    std::cerr << "abox-net stats: " << error << '\n';
    return 3;
  }
  auto fields = parse_stats_json(base::as_bytes(*reply));
  if (!fields.ok()) {
    std::cerr << "abox-net stats: " << *path << " did not answer with counters: " << fields.error() << '\n';
    return 3;
  }
  if (json) {
    // Validated above; passed through as sent (one line).
    while (!reply->empty() && (reply->back() == '\n' || reply->back() == '\r')) reply->pop_back();
    std::cout << *reply << '\n';
    return 0;
  }
  std::size_t width = 0;
  for (const auto& f : *fields) width = std::max(width, f.name.size());
  for (const auto& f : *fields) {
    std::string value = std::to_string(f.value);
    std::cout << f.name << std::string(width - f.name.size() + 2, ' ') << std::string(20 - value.size(), ' ')
              << value << '\n';
  }
  return 0;
}

}  // namespace abox::netstack
