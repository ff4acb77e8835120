// abox-helper: the root helper of one operator (docs/helper.md). Options,
// then HelperServer until SIGTERM.
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "helper/server.h"

namespace {

constexpr std::string_view kVersion = "0.1.0";

constexpr std::string_view kUsage =
    "usage: abox-helper --operator USER|UID [--group GROUP|GID] [--socket PATH] [--cgroup-root DIR]\n"
    "\n"
    "The root helper of one operator: makes and removes the cgroups of the\n"
    "operator's instances (memory.max, cpu.max, pids.max) and moves their\n"
    "processes in, and makes and removes tap devices in network namespaces the\n"
    "operator owns. Nothing else. Runs as root; only the operator's uid may use it.\n"
    "\n"
    "Options:\n"
    "  --operator USER|UID   the one uid served (required; not root)\n"
    "  --group GROUP|GID     the group that may reach the socket (default: the\n"
    "                        operator's primary group)\n"
    "  --socket PATH         where to listen (default: /run/abox/helper-UID.sock)\n"
    "  --cgroup-root DIR     the cgroup v2 folder for the instances' cgroups\n"
    "                        (default: /sys/fs/cgroup/abox-UID; 'none' for no cgroups)\n"
    "  -h, --help            this text\n"
    "  --version             print the version\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM or SIGINT, 2 usage error, 3 could not start\n"
    "(not root, the socket cannot be made; the message says why).\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "abox-helper: %s (see 'abox-helper --help')\n", message.c_str());
  return 2;
}

std::optional<std::uint32_t> number(std::string_view s) {
  std::uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> op, group_name, socket_path, cgroup_root;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage.data(), stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("abox-helper %.*s\n", static_cast<int>(kVersion.size()), kVersion.data());
      return 0;
    }
    std::string_view name = a, value;
    bool has_value = false;
    if (auto eq = a.find('='); a.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    std::optional<std::string>* slot = nullptr;
    if (name == "--operator") slot = &op;
    if (name == "--group") slot = &group_name;
    if (name == "--socket") slot = &socket_path;
    if (name == "--cgroup-root") slot = &cgroup_root;
    if (slot == nullptr) return usage_error("unknown option '" + std::string(name) + "'");
    if (!has_value) {
      if (i + 1 >= args.size()) return usage_error(std::string(name) + " needs a value");
      value = args[++i];
    }
    *slot = std::string(value);
  }
  if (!op) return usage_error("--operator is required");

  abox::helper::HelperConfig config;
  const passwd* pw = nullptr;
  if (auto uid = number(*op)) {
    config.operator_uid = *uid;
    pw = ::getpwuid(*uid);
  } else {
    pw = ::getpwnam(op->c_str());
    if (pw == nullptr) return usage_error("--operator: no user '" + *op + "'");
    config.operator_uid = pw->pw_uid;
  }
  if (config.operator_uid == 0) return usage_error("--operator: the operator must not be root");
  if (group_name) {
    if (auto gid = number(*group_name)) {
      config.operator_gid = *gid;
    } else if (const struct group* gr = ::getgrnam(group_name->c_str())) {
      config.operator_gid = gr->gr_gid;
    } else {
      return usage_error("--group: no group '" + *group_name + "'");
    }
  } else if (pw != nullptr) {
    config.operator_gid = pw->pw_gid;
  } else {
    return usage_error("--operator: uid " + *op + " has no passwd entry: give --group");
  }
  const std::string uid_text = std::to_string(config.operator_uid);
  config.socket_path = socket_path.value_or("/run/abox/helper-" + uid_text + ".sock");
  config.cgroup_root = cgroup_root.value_or("/sys/fs/cgroup/abox-" + uid_text);
  if (config.cgroup_root == "none") config.cgroup_root.clear();

  if (::geteuid() != 0) {
    std::fprintf(stderr, "abox-helper: must run as root (it makes cgroups and tap devices)\n");
    return 3;
  }
  if (!socket_path) ::mkdir("/run/abox", 0755);  // the default's folder; an error shows at bind
  auto server = abox::helper::HelperServer::create(config);
  if (!server.ok()) {
    std::fprintf(stderr, "abox-helper: %s\n", server.error().c_str());
    return 3;
  }
  (*server)->run();
  return 0;
}
