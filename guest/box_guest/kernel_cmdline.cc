#include "guest/box_guest/kernel_cmdline.h"

#include <fcntl.h>
#include <unistd.h>

#include "base/unique_fd.h"

namespace abox::guest {

std::string cmdline_option(std::string_view cmdline, std::string_view key, std::string_view fallback) {
  std::string want = "abox.";
  want.append(key);
  want.push_back('=');
  std::string_view found = fallback;
  std::size_t at = 0;
  while (at < cmdline.size()) {
    std::size_t end = cmdline.find_first_of(" \t\n", at);
    if (end == std::string_view::npos) end = cmdline.size();
    std::string_view word = cmdline.substr(at, end - at);
    if (word.size() >= want.size() && word.substr(0, want.size()) == want) found = word.substr(want.size());
    at = end + 1;
  }
  return std::string(found);
}

std::string read_kernel_cmdline(const char* path) {
  base::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  std::string out(4096, '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace abox::guest
