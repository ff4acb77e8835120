#include "engine/cli/cp_command.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "base/random.h"
#include "base/unique_fd.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/machine_setup.h"
#include "engine/cli/options.h"
#include "engine/cli/run_command.h"
#include "engine/instance/state_folder.h"
#include "engine/instance/supervisor.h"
#include "engine/process/pipe_reader.h"
#include "engine/vmm/qemu_microvm.h"

namespace abox::engine {
namespace {

constexpr std::string_view kUsage =
    "usage: abox cp [--max-bytes SIZE] NAME:GUEST_PATH -\n"
    "\n"
    "Writes GUEST_PATH (a file or a folder) of the instance NAME to stdout as a tar\n"
    "stream, and nothing else: of a running instance, or of one stopped with --keep\n"
    "(its disk boots once more in a VM of its own that runs nothing but the copy: the\n"
    "host never opens the guest's filesystem itself). The stream is made in the guest, by the\n"
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

// The stopped instance's kept disk, booted once more in a throwaway instance
// (its image, its policy, no broker, no command) that only makes the stream.
int copy_from_stopped(const std::string& folder, const std::string& name, const std::string& path,
                      std::uint64_t max_bytes) {
  std::ifstream record(folder + "/instance.json");
  std::string json((std::istreambuf_iterator<char>(record)), std::istreambuf_iterator<char>());
  std::string image;
  constexpr std::string_view kKey = "\"image\":\"";
  if (auto at = json.find(kKey); at != std::string::npos) {
    auto end = json.find('"', at + kKey.size());
    if (end != std::string::npos) image = json.substr(at + kKey.size(), end - at - kKey.size());
  }
  if (image.empty()) {
    std::cerr << "abox cp: " << folder << "/instance.json does not name the instance's image\n";
    return kExitFailed;
  }
  InstanceConfig c;
  base::SystemRandom random;
  static constexpr char kDigits[] = "0123456789abcdef";
  c.name = "cp-";
  for (std::uint64_t v = random.next_u64(), i = 0; i < 8; ++i) c.name += kDigits[(v >> (4 * i)) & 15];
  auto root = default_instances_root();
  c.instances_root = *root;
  c.policy_file = folder + "/policy.toml";
  c.argv = {"true"};  // never started
  c.selftest = false;
  c.existing_disk = folder + "/disk.ext4";
  c.copy_out_only = CopyOutOnly{path, STDOUT_FILENO, max_bytes};
  if (auto problem = prepare_machine(c, image, "auto", "abox cp", std::cerr); !problem.empty()) {
    std::cerr << "abox cp: " << problem << '\n';
    return kExitFailed;
  }
  if (c.root_disk.empty()) {
    std::cerr << "abox cp: the image " << image
              << " has no disk: a stopped instance of it kept nothing to copy\n";
    return kExitFailed;
  }
  std::cerr << "abox cp: " << name << " is stopped: booting its disk to copy " << path << '\n';
  ::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io;
  QemuMicrovm qemu(c.qemu);
  std::optional<InstanceOutcome> outcome;
  auto null = open_dev_null();
  InstanceSupervisor supervisor(io, c, qemu, null.get(), null.get(), STDERR_FILENO, -1,
                                [&](const InstanceOutcome& o) {
                                  outcome = o;
                                  io.stop();
                                });
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) supervisor.stop(signo);
  });
  supervisor.start();
  io.run();
  if (!outcome || outcome->kind != InstanceOutcome::Kind::kExited) {
    std::cerr << "abox cp: " << (outcome ? outcome->reason : std::string("the copy ended without an outcome"))
              << '\n';
    return kExitFailed;
  }
  if (!outcome->exit || outcome->exit->value != 0) {
    std::cerr << "abox cp: " << path << ": " << outcome->reason << '\n';
    return kExitNo;
  }
  return kExitOk;
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
    int err = errno;
    std::string folder = *root + "/" + name;
    if (::access((folder + "/disk.ext4").c_str(), R_OK) == 0)
      return copy_from_stopped(folder, name, path, max_bytes);
    std::cerr << "abox cp: the instance " << name << " is not running (" << socket_path << ": "
              << std::strerror(err) << "), and no kept disk of it is there to boot\n";
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
