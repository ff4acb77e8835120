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
#include "base/command_line.h"
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
    "  -j, --json   print the JSON object as abox-net sent it (one line)\n"
    "\n"
    "Exit status: 0 printed, 2 usage error, 3 no answer (nothing listens at\n"
    "PATH, permission denied, timeout after 5 s) or an answer that is not\n"
    "abox-net's counters.\n";

constexpr std::size_t kMaxReply = 1 << 20;
constexpr int kTimeoutSeconds = 5;

}  // namespace

std::optional<std::string> ask_abox_net(const std::string& path, std::string_view request, std::string& error,
                                        std::string_view body) {
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
    if (errno == ECONNREFUSED) {
      // The socket file is there but nobody listens: abox-net leaves it
      // behind when it exits (its sandbox forbids unlink).
      error = "nothing is running at " + path + " (a socket left by an abox-net that has exited)";
    } else if (errno == ENOENT) {
      error = "no socket at " + path + " (is abox-net running with --stats-socket " + path + "?)";
    } else {
      error = "cannot connect to " + path + ": " + std::strerror(errno);
    }
    return std::nullopt;
  }
  std::string line(request);
  line += '\n';
  line += body;
  // A peer that answers without reading may have closed already (EPIPE):
  // its answer is still there to read, and is judged as any other.
  std::string send_error;
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    send_error = "writing to " + path + ": " + std::strerror(errno);
  if (!body.empty()) ::shutdown(fd.get(), SHUT_WR);
  std::string reply;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET && !reply.empty()) break;  // it answered, then closed on our unread request
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
  if (reply.empty() && !send_error.empty()) {
    error = send_error;
    return std::nullopt;
  }
  return reply;
}

int run_stats_command(std::span<const std::string_view> args) {
  constexpr std::string_view kCommand = "abox-net stats";
  static constexpr base::OptionSpec kOptions[] = {{"json", 'j', false}};
  auto parsed = base::start_command(kCommand, kUsage, args, kOptions, std::cout, std::cerr);
  if (!parsed.ok()) return parsed.error();
  const bool json = parsed->has("json");
  if (parsed->positionals.size() != 1) {
    std::cerr << base::usage_error_line(
        kCommand, parsed->positionals.empty() ? "the stats socket PATH is required"
                                              : "unexpected argument '" + parsed->positionals[1] + "'");
    return 2;
  }
  const std::optional<std::string> path = parsed->positionals[0];
  std::string error;
  auto reply = ask_abox_net(*path, "stats", error);
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
