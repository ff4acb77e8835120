#include "helper/cgroup_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace abox::helper {

namespace {

constexpr std::array<std::string_view, 3> kControllers = {"memory", "cpu", "pids"};

std::string errno_text(int err) {
  return std::strerror(err);
}

base::Err<WireError> fail(ErrorCode code, std::string message) {
  return base::Err{WireError{code, std::move(message)}};
}

// A small kernel file (cgroup.controllers, /proc/PID/status), whole, up to 8 KiB.
base::Result<std::string, int> read_small(int dirfd, const char* name) {
  base::UniqueFd fd(::openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return base::Err{errno};
  std::string out(8192, '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Err{errno};
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

// One write of text to a cgroup file (the kernel takes each write whole).
base::Result<void, int> write_file(int dirfd, const char* name, std::string_view text) {
  base::UniqueFd fd(::openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return base::Err{errno};
  ssize_t n;
  do {
    n = ::write(fd.get(), text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return base::Err{errno};
  if (static_cast<std::size_t>(n) != text.size()) return base::Err{EIO};
  return {};
}

bool has_word(std::string_view list, std::string_view word) {
  std::size_t start = 0;
  while (start < list.size()) {
    auto end = list.find_first_of(" \n", start);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(start, end - start) == word) return true;
    start = end + 1;
  }
  return false;
}

// Enables kControllers for dirfd's children.
base::Result<void, std::string> enable_controllers(int dirfd, const std::string& path) {
  auto available = read_small(dirfd, "cgroup.controllers");
  if (!available.ok()) return base::Err{path + "/cgroup.controllers: " + errno_text(available.error())};
  for (auto c : kControllers) {
    if (!has_word(*available, c)) {
      return base::Err{path + " has no " + std::string(c) +
                       " controller in cgroup v2 (is it bound to a cgroup v1 hierarchy?)"};
    }
  }
  auto enabled = read_small(dirfd, "cgroup.subtree_control");
  if (!enabled.ok()) return base::Err{path + "/cgroup.subtree_control: " + errno_text(enabled.error())};
  for (auto c : kControllers) {
    if (has_word(*enabled, c)) continue;
    auto w = write_file(dirfd, "cgroup.subtree_control", "+" + std::string(c));
    if (!w.ok()) {
      std::string why = errno_text(w.error());
      if (w.error() == EBUSY) why += " (it has processes of its own: give a root whose parent has none)";
      return base::Err{path + "/cgroup.subtree_control: cannot enable " + std::string(c) + ": " + why};
    }
  }
  return {};
}

// glibc 2.36's <sys/pidfd.h> declares these without C linkage: the syscalls directly.
int sys_pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}
bool pid_alive(int pidfd) {
  return ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0;
}

// The process's real, effective, saved and filesystem uids, from
// /proc/PID/status (kernel text, not the client's).
base::Result<std::array<uid_t, 4>, int> process_uids(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  auto text = read_small(AT_FDCWD, path.c_str());
  if (!text.ok()) return base::Err{text.error()};
  std::string_view s = *text;
  auto at = s.find("\nUid:");
  if (at == std::string_view::npos) return base::Err{EPROTO};
  s.remove_prefix(at + 5);
  std::array<uid_t, 4> uids{};
  for (auto& u : uids) {
    while (!s.empty() && (s.front() == '\t' || s.front() == ' ')) s.remove_prefix(1);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), u);
    if (ec != std::errc()) return base::Err{EPROTO};
    s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  }
  return uids;
}

std::size_t count_children(int dirfd) {
  int dup = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup < 0) return kMaxCgroups;  // cannot tell: refuse rather than grow
  DIR* dir = ::fdopendir(dup);
  if (dir == nullptr) {
    ::close(dup);
    return kMaxCgroups;
  }
  std::size_t n = 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  ::closedir(dir);
  return n;
}

}  // namespace

std::string memory_max_text(const CgroupLimits& l) {
  return l.memory_max ? std::to_string(*l.memory_max) : "max";
}
std::string cpu_max_text(const CgroupLimits& l) {
  return l.cpu_max ? std::to_string(l.cpu_max->quota_us) + " " + std::to_string(l.cpu_max->period_us) : "max";
}
std::string pids_max_text(const CgroupLimits& l) {
  return l.pids_max ? std::to_string(*l.pids_max) : "max";
}

base::Result<CgroupTree, std::string> CgroupTree::open(const std::string& root) {
  if (root.size() < 2 || root.front() != '/' || root.back() == '/') {
    return base::Err{"cgroup root '" + root + "': give an absolute path without a trailing '/'"};
  }
  const auto slash = root.rfind('/');
  const std::string parent = slash == 0 ? "/" : root.substr(0, slash);
  const std::string leaf = root.substr(slash + 1);
  if (leaf == "." || leaf == "..") return base::Err{"cgroup root '" + root + "': name a folder"};
  struct statfs fs {};
  if (::statfs(parent.c_str(), &fs) != 0) return base::Err{parent + ": " + errno_text(errno)};
  if (fs.f_type != CGROUP2_SUPER_MAGIC) {
    return base::Err{parent +
                     " is not a cgroup v2 folder (this host mounts cgroup v2 elsewhere, or not at all)"};
  }
  base::UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd) return base::Err{parent + ": " + errno_text(errno)};
  if (auto ok = enable_controllers(parent_fd.get(), parent); !ok.ok()) return base::Err{ok.error()};
  if (::mkdirat(parent_fd.get(), leaf.c_str(), 0755) != 0 && errno != EEXIST) {
    return base::Err{root + ": " + errno_text(errno)};
  }
  base::UniqueFd fd(::openat(parent_fd.get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return base::Err{root + ": " + errno_text(errno)};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != 0) return base::Err{root + ": not owned by root"};
  if (auto ok = enable_controllers(fd.get(), root); !ok.ok()) return base::Err{ok.error()};
  return CgroupTree(root, std::move(fd));
}

base::Result<void, WireError> CgroupTree::create(std::string_view instance, const CgroupLimits& limits) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return base::Err{ok.error()};
  const std::string name(instance);
  if (count_children(fd_.get()) >= kMaxCgroups) {
    return fail(ErrorCode::kLimit, "the helper keeps at most " + std::to_string(kMaxCgroups) +
                                       " cgroups under " + root_ + ": delete one first");
  }
  if (::mkdirat(fd_.get(), name.c_str(), 0755) != 0) {
    if (errno == EEXIST)
      return fail(ErrorCode::kExists, "a cgroup for instance '" + name + "' already exists");
    return fail(ErrorCode::kSystem, root_ + "/" + name + ": " + errno_text(errno));
  }
  base::UniqueFd dir(::openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  std::string problem;
  if (!dir) {
    problem = root_ + "/" + name + ": " + errno_text(errno);
  } else {
    const std::pair<const char*, std::string> files[] = {
        {"memory.max", memory_max_text(limits)},
        {"cpu.max", cpu_max_text(limits)},
        {"pids.max", pids_max_text(limits)},
    };
    for (const auto& [file, text] : files) {
      auto w = write_file(dir.get(), file, text);
      if (!w.ok()) {
        problem = "writing '" + text + "' to " + file + ": " + errno_text(w.error());
        break;
      }
    }
  }
  if (problem.empty()) return {};
  dir.reset();
  ::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR);
  return fail(ErrorCode::kSystem, problem + " (the cgroup was removed again)");
}

base::Result<void, WireError> CgroupTree::move(std::string_view instance, std::span<const pid_t> pids,
                                               uid_t operator_uid) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return base::Err{ok.error()};
  const std::string name(instance);
  base::UniqueFd dir(::openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return fail(ErrorCode::kNotFound, "no cgroup for instance '" + name + "'");
    }
    return fail(ErrorCode::kSystem, root_ + "/" + name + ": " + errno_text(errno));
  }
  // Check every process before moving any.
  std::vector<base::UniqueFd> held;
  for (pid_t pid : pids) {
    base::UniqueFd pidfd(sys_pidfd_open(pid));
    if (!pidfd) {
      if (errno == ESRCH) return fail(ErrorCode::kNotFound, "no process " + std::to_string(pid));
      if (errno == EINVAL) {
        return fail(ErrorCode::kNotFound, std::to_string(pid) + " is not a process (a thread's id?)");
      }
      return fail(ErrorCode::kSystem, "pidfd_open(" + std::to_string(pid) + "): " + errno_text(errno));
    }
    auto uids = process_uids(pid);
    if (!uids.ok() || !pid_alive(pidfd.get())) {
      return fail(ErrorCode::kNotFound, "process " + std::to_string(pid) + " exited");
    }
    for (uid_t u : *uids) {
      if (u != operator_uid) {
        return fail(ErrorCode::kNotPermitted, "process " + std::to_string(pid) + " runs as uid " +
                                                  std::to_string(u) + ", not as the operator (uid " +
                                                  std::to_string(operator_uid) + ")");
      }
    }
    held.push_back(std::move(pidfd));
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    auto w = write_file(dir.get(), "cgroup.procs", std::to_string(pids[i]));
    if (!w.ok()) {
      if (w.error() == ESRCH)
        return fail(ErrorCode::kNotFound, "process " + std::to_string(pids[i]) + " exited");
      return fail(ErrorCode::kSystem,
                  "moving " + std::to_string(pids[i]) + " into " + name + ": " + errno_text(w.error()));
    }
    if (!pid_alive(held[i].get())) {
      return fail(ErrorCode::kNotFound, "process " + std::to_string(pids[i]) +
                                            " exited while it was moved (its number may be reused)");
    }
  }
  return {};
}

base::Result<void, WireError> CgroupTree::remove(std::string_view instance) {
  if (auto ok = check_instance_name(instance); !ok.ok()) return base::Err{ok.error()};
  const std::string name(instance);
  if (::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return fail(ErrorCode::kNotFound, "no cgroup for instance '" + name + "'");
    }
    if (errno == EBUSY) {
      return fail(ErrorCode::kBusy,
                  "the cgroup of instance '" + name + "' still has processes: stop them first");
    }
    return fail(ErrorCode::kSystem, root_ + "/" + name + ": " + errno_text(errno));
  }
  return {};
}

bool CgroupTree::remove_root_if_empty() {
  fd_.reset();
  return ::rmdir(root_.c_str()) == 0;
}

}  // namespace abox::helper
