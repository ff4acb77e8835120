#include "engine/layout.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "engine/process/child_process.h"

#ifndef ABOX_SOURCE_DIR
#define ABOX_SOURCE_DIR ""
#endif

namespace abox::engine {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::string(v) : fallback;
}

std::string first_existing(std::initializer_list<std::string> candidates) {
  for (const auto& c : candidates) {
    if (exists(c)) return c;
  }
  return *candidates.begin();
}

}  // namespace

Layout Layout::discover() {
  Layout l;
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  l.self = ec ? std::string("/proc/self/exe") : self.string();
  std::filesystem::path bin = std::filesystem::path(l.self).parent_path();
  std::filesystem::path prefix = bin.parent_path();
  std::string source = ABOX_SOURCE_DIR;

  l.abox_net = env_or("ABOX_NET",
                      first_existing({(bin / "abox-net").string(), (prefix / "netstack/abox-net").string()}));
  l.box_guest = env_or("ABOX_BOX_GUEST", first_existing({(prefix / "lib/abox/box-guest").string(),
                                                         (prefix / "guest/box-guest").string()}));
  l.recipes_dir = env_or("ABOX_RECIPES_DIR",
                         first_existing({(prefix / "share/abox/images").string(), source + "/guest/image"}));
  l.kernel_dir = env_or(
      "ABOX_GUEST_KERNEL_DIR",
      first_existing({(prefix / "share/abox/guest-kernel").string(), source + "/.cache/guest-kernel"}));
  l.modules_list =
      first_existing({(prefix / "share/abox/modules.list").string(), source + "/guest/modules.list"});
  l.qemu = env_or("ABOX_QEMU", find_program("qemu-system-x86_64"));
  return l;
}

std::string default_cache_dir() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  if (cache != nullptr && cache[0] == '/') return std::string(cache) + "/abox";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/abox";
  return "";
}

}  // namespace abox::engine
