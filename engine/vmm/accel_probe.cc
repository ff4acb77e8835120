#include "engine/vmm/accel_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/process/child_process.h"
#include "engine/process/pipe_reader.h"

namespace abox::engine {
namespace {

std::string stat_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ":missing";
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

std::string probe_key(const std::string& qemu, const std::string& kernel) {
  utsname u{};
  ::uname(&u);
  return std::string(u.release) + "|" + stat_key(qemu) + "|" + stat_key(kernel);
}

// Boots kernel under KVM; true when it reached the kernel's own panic.
bool kvm_boots(const std::string& qemu, const std::string& kernel, std::string& why) {
  auto out = make_pipe();
  auto null = open_dev_null();
  ChildSpec spec;
  spec.program = qemu;
  spec.argv = {qemu,
               "-M",
               "microvm",
               "-accel",
               "kvm",
               "-cpu",
               "host",
               "-m",
               "128",
               "-smp",
               "1",
               "-nodefaults",
               "-no-user-config",
               "-display",
               "none",
               "-no-reboot",
               "-serial",
               "stdio",
               "-kernel",
               kernel,
               "-append",
               "console=ttyS0 panic=-1 reboot=t"};
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  spec.fds = {{0, null.get()}, {1, out.write.get()}, {2, out.write.get()}};
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) {
    why = "the KVM probe could not start QEMU: " + child.error();
    return false;
  }
  out.write.reset();
  std::string seen;
  auto deadline = std::chrono::steady_clock::now() + kProbeTimeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{out.read.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[4096];
    ssize_t n = ::read(out.read.get(), buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<std::size_t>(n));
    if (seen.size() > (1 << 20)) seen.erase(0, seen.size() - 4096);
    if (seen.find("Kernel panic") != std::string::npos ||
        seen.find("VFS: Unable to mount root") != std::string::npos)
      break;
  }
  child->kill_and_reap();
  bool ok = seen.find("Kernel panic") != std::string::npos ||
            seen.find("VFS: Unable to mount root") != std::string::npos;
  if (!ok) {
    why = seen.empty() ? "a kernel under /dev/kvm printed nothing within " +
                             std::to_string(kProbeTimeout.count()) + " s (this host's KVM cannot run it)"
                       : "a kernel under /dev/kvm did not boot: " +
                             seen.substr(seen.size() > 200 ? seen.size() - 200 : 0);
  }
  return ok;
}

}  // namespace

AccelChoice choose_accel(const std::string& requested, const std::string& qemu, const std::string& kernel,
                         const std::string& cache_dir) {
  AccelChoice c;
  if (requested == "tcg") {
    c.accel = Accel::kTcg;
    c.why = "--accel tcg";
    return c;
  }
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    c.degraded = true;
    c.why = std::string("/dev/kvm: ") + std::strerror(errno);
    return c;
  }
  ::close(fd);

  std::string key = probe_key(qemu, kernel);
  std::string cache_file = cache_dir.empty() ? "" : cache_dir + "/kvm-probe";
  if (!cache_file.empty()) {
    std::ifstream f(cache_file);
    std::string cached_key, verdict, why;
    if (std::getline(f, cached_key) && std::getline(f, verdict) && cached_key == key) {
      std::getline(f, why);
      if (verdict == "kvm") {
        c.accel = Accel::kKvm;
        c.why = "KVM (probe cached)";
      } else {
        c.degraded = true;
        c.why = why + " (cached: " + cache_file + ")";
      }
      return c;
    }
  }
  std::string why;
  bool works = kvm_boots(qemu, kernel, why);
  if (!cache_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    std::ofstream f(cache_file, std::ios::trunc);
    f << key << '\n' << (works ? "kvm" : "tcg") << '\n' << why << '\n';
  }
  if (works) {
    c.accel = Accel::kKvm;
    c.why = "KVM (probed)";
  } else {
    c.degraded = true;
    c.why = why;
  }
  return c;
}

}  // namespace abox::engine
