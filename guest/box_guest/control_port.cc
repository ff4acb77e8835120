#include "guest/box_guest/control_port.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "guest/box_guest/console.h"

namespace abox::guest {
namespace {

std::optional<std::string> read_small_file(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[257];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n < 0) return std::nullopt;
  return std::string(buf, static_cast<std::size_t>(n));
}

void sleep_ms(long ms) {
  const timespec t{ms / 1000, (ms % 1000) * 1'000'000};
  ::nanosleep(&t, nullptr);
}

}  // namespace

std::optional<std::string> find_virtio_port(const std::string& class_dir, std::string_view name) {
  DIR* dir = ::opendir(class_dir.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<std::string> entries;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    if (entries.size() >= 256) break;  // a guest has a handful of ports
    entries.emplace_back(e->d_name);
  }
  ::closedir(dir);
  std::sort(entries.begin(), entries.end());  // the same port every time if two share a name
  for (const auto& entry : entries) {
    auto text = read_small_file(class_dir + "/" + entry + "/name");
    if (!text) continue;
    if (!text->empty() && text->back() == '\n') text->pop_back();
    if (*text == name) return entry;
  }
  return std::nullopt;
}

base::Result<base::UniqueFd, std::string> open_control_port(std::string_view name, int wait_ms,
                                                            const ControlPortPaths& paths) {
  const std::int64_t end = monotonic_ms() + wait_ms;
  std::string last = "no virtio port named " + std::string(name);
  base::UniqueFd fd;
  while (!fd) {
    if (auto entry = find_virtio_port(paths.class_dir, name)) {
      std::string dev = paths.dev_dir + "/" + *entry;
      fd.reset(::open(dev.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
      if (!fd) last = "open " + dev + ": " + std::strerror(errno);
    }
    if (!fd) {
      if (monotonic_ms() >= end) return base::Err{last + " within " + std::to_string(wait_ms) + " ms"};
      sleep_ms(20);
    }
  }
  for (;;) {
    pollfd p{fd.get(), POLLIN | POLLOUT, 0};
    int n = ::poll(&p, 1, 0);
    if (n >= 0 && (p.revents & POLLHUP) == 0) return fd;
    if (monotonic_ms() >= end) return base::Err{"the host end of the control port is not connected"};
    sleep_ms(20);
  }
}

}  // namespace abox::guest
