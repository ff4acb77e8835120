#include "engine/cli/cp_command.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "base/unique_fd.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/options.h"
#include "engine/cli/run_command.h"
#include "engine/instance/state_folder.h"

namespace abox::engine {
namespace {

constexpr std::string_view kUsage =
    "usage: abox cp [--max-bytes SIZE] NAME:GUEST_PATH -\n"
    "\n"
    "Writes GUEST_PATH (a file or a folder) of the running instance NAME to stdout\n"
    "as a tar stream, and nothing else. The stream is made in the guest, by the\n"
    "image's tar, as the agent (uid 1000): what the agent cannot read does not come\n"
    "out. abox never unpacks it and never follows anything in it; unpack it yourself,\n"
    "knowing the agent made it (e.g. tar -x --no-same-owner -C an-empty-folder).\n"
    "\n"
    "Options:\n"
    "  --max-bytes SIZE   stop (exit 1) past SIZE bytes of stream (default 1G; M and G suffixes)\n"
    "\n"
    "Exit status: 0 copied, 1 the guest could not make the stream (no such path) or it was\n"
    "over --max-bytes, 2 usage error, 3 the instance is not running or cannot be reached.\n";

int usage_error(const std::string& message) {
  std::cerr << "abox cp: " << message << " (see 'abox cp --help')\n";
  return kExitUsage;
}

bool read_exact(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// One line from fd, at most 4096 bytes (the server's status lines).
std::string read_line(int fd) {
  std::string line;
  char c = 0;
  while (line.size() < 4096 && read_exact(fd, &c, 1) && c != '\n') line.push_back(c);
  return line;
}

}  // namespace

int run_cp_command(std::span<const std::string_view> args) {
  static constexpr OptionSpec kOptions[] = {{"max-bytes", 0, true}};
  auto parsed = parse_options(args, kOptions, false);
  if (!parsed.ok()) return usage_error(parsed.error());
  if (parsed->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  const auto& pos = parsed->positionals;
  if (pos.size() != 2) return usage_error("expected NAME:GUEST_PATH -");
  if (pos[1] != "-")
    return usage_error("only '-' (stdout) is a destination: abox never unpacks what the guest made");
  auto colon = pos[0].find(':');
  if (colon == std::string::npos) return usage_error("expected NAME:GUEST_PATH");
  std::string name = pos[0].substr(0, colon);
  std::string path = pos[0].substr(colon + 1);
  if (!valid_instance_name(name)) return usage_error("'" + name + "' is not an instance name");
  if (path.empty() || path[0] != '/') path = "/home/agent/" + path;
  if (path.find('\n') != std::string::npos) return usage_error("a newline in the path");
  std::uint64_t max_bytes = 1ull << 30;
  if (auto v = parsed->last("max-bytes")) {
    auto m = parse_mebibytes(*v);
    if (!m) return usage_error("--max-bytes " + *v + ": a size like 512M or 2G");
    max_bytes = std::uint64_t{*m} << 20;
  }
  if (::isatty(STDOUT_FILENO)) {
    std::cerr << "abox cp: refusing to write a tar stream to a terminal (redirect it: > file.tar)\n";
    return kExitUsage;
  }
  auto root = default_instances_root();
  if (!root.ok()) {
    std::cerr << "abox cp: " << root.error() << '\n';
    return kExitFailed;
  }
  std::string socket_path = *root + "/" + name + "/api.sock";
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    std::cerr << "abox cp: " << socket_path << ": too long for a unix socket\n";
    return kExitFailed;
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (!fd || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    std::cerr << "abox cp: the instance " << name << " is not running (" << socket_path << ": "
              << std::strerror(errno) << ")\n";
    return kExitFailed;
  }
  std::string request = "ABOX-CP/1 " + path + "\n";
  if (!write_all(fd.get(), request.data(), request.size())) {
    std::cerr << "abox cp: the instance closed the connection\n";
    return kExitFailed;
  }
  std::string status = read_line(fd.get());
  if (status != "OK") {
    std::cerr << "abox cp: "
              << (status.rfind("ERR ", 0) == 0 ? status.substr(4) : "no answer from the instance") << '\n';
    return kExitFailed;
  }
  std::uint64_t total = 0;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    unsigned char len_bytes[4];
    if (!read_exact(fd.get(), len_bytes, 4)) {
      std::cerr << "abox cp: the instance ended the stream early\n";
      return kExitFailed;
    }
    std::uint32_t len = (std::uint32_t{len_bytes[0]} << 24) | (std::uint32_t{len_bytes[1]} << 16) |
                        (std::uint32_t{len_bytes[2]} << 8) | len_bytes[3];
    if (len == 0) break;
    if (len > buf.size()) {
      std::cerr << "abox cp: a chunk of " << len << " bytes: not the instance's stream\n";
      return kExitFailed;
    }
    if (!read_exact(fd.get(), buf.data(), len)) {
      std::cerr << "abox cp: the instance ended the stream early\n";
      return kExitFailed;
    }
    total += len;
    if (total > max_bytes) {
      std::cerr << "abox cp: the stream passed --max-bytes (" << max_bytes << " bytes): stopped\n";
      return kExitNo;
    }
    if (!write_all(STDOUT_FILENO, buf.data(), len)) {
      std::cerr << "abox cp: stdout: " << std::strerror(errno) << '\n';
      return kExitFailed;
    }
  }
  std::string done = read_line(fd.get());
  if (done.rfind("DONE 1", 0) == 0) return kExitOk;
  std::cerr << "abox cp: " << path << ": " << (done.size() > 7 ? done.substr(7) : "the copy did not finish")
            << '\n';
  return kExitNo;
}

}  // namespace abox::engine
