#include "guest/box_guest/ca_install.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "guest/box_guest/interface_config.h"

namespace abox::guest {
namespace {

constexpr std::size_t kMaxSystemBundle = 4 << 20;

// The file's bytes (up to the cap), or "" when it is missing.
base::Result<std::string, std::string> read_bundle(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::string();
    return base::Err{"open " + path + ": " + std::strerror(errno)};
  }
  std::string out;
  char buf[65536];
  while (out.size() < kMaxSystemBundle) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::Err{"read " + path + ": " + std::strerror(errno)};
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  if (out.size() > kMaxSystemBundle) out.resize(kMaxSystemBundle);
  return out;
}

}  // namespace

base::Result<void, std::string> install_ca(std::string_view pem, const CaPaths& paths) {
  if (::mkdir(paths.dir.c_str(), 0755) != 0 && errno != EEXIST)
    return base::Err{"mkdir " + paths.dir + ": " + std::strerror(errno)};
  if (::chmod(paths.dir.c_str(), 0755) != 0)
    return base::Err{"chmod " + paths.dir + ": " + std::strerror(errno)};
  std::string ca(pem);
  if (!ca.empty() && ca.back() != '\n') ca.push_back('\n');
  if (auto r = write_file_atomically(paths.dir + "/ca.pem", ca); !r.ok()) return r;
  auto system = read_bundle(paths.system_bundle);
  if (!system.ok()) return base::Err{system.error()};
  std::string bundle = std::move(*system);
  if (!bundle.empty() && bundle.back() != '\n') bundle.push_back('\n');
  bundle += ca;
  return write_file_atomically(paths.dir + "/ca-bundle.pem", bundle);
}

}  // namespace abox::guest
