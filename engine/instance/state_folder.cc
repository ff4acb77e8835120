#include "engine/instance/state_folder.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/unique_fd.h"

namespace abox::engine {
namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// mkdir -p with mode 0700 for the folders it makes; an existing folder is kept as it is.
base::Result<void, std::string> make_dirs(const std::string& path) {
  std::string at;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    at = path.substr(0, pos);
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) return base::Err{errno_text(at)};
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return base::Err{errno_text(path)};
  if (!S_ISDIR(st.st_mode)) return base::Err{path + ": not a directory"};
  return {};
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}

}  // namespace

bool valid_instance_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

base::Result<std::string, std::string> default_instances_root() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state != nullptr && state[0] == '/') return std::string(state) + "/abox/instances";
  const char* home = std::getenv("HOME");
  if (home == nullptr || home[0] != '/')
    return base::Err{std::string("neither XDG_STATE_HOME nor HOME is set")};
  return std::string(home) + "/.local/state/abox/instances";
}

base::Result<StateFolder, std::string> StateFolder::create(const std::string& root, const std::string& name) {
  if (!valid_instance_name(name))
    return base::Err{"instance name '" + name +
                     "': use 1-64 of A-Z a-z 0-9 . _ - (not starting with . or -)"};
  if (auto made = make_dirs(root); !made.ok()) return base::Err{made.error()};
  std::string path = root + "/" + name;
  // The longest socket path must fit a sockaddr_un (107 bytes and the NUL).
  constexpr std::size_t kSunPath = 107;
  std::size_t longest = path.size() + std::string_view("/broker.sock").size();
  if (longest > kSunPath) {
    return base::Err{"the state folder " + path + " is too long for its unix sockets (" +
                     std::to_string(longest) + " bytes, at most " + std::to_string(kSunPath) +
                     "): use a shorter --name or XDG_STATE_HOME"};
  }
  if (::mkdir(path.c_str(), 0700) != 0) {
    if (errno == EEXIST)
      return base::Err{"an instance named '" + name + "' exists (" + path +
                       "): pick another --name, or remove it"};
    return base::Err{errno_text(path)};
  }
  return StateFolder(path);
}

base::Result<StateFolder, std::string> StateFolder::open(const std::string& root, const std::string& name) {
  if (!valid_instance_name(name)) return base::Err{"instance name '" + name + "': not a valid name"};
  std::string path = root + "/" + name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return base::Err{"no instance named '" + name + "'"};
  if (!S_ISDIR(st.st_mode)) return base::Err{path + ": not a directory"};
  return StateFolder(path);
}

StagedFile::StagedFile(StagedFile&& other) noexcept
    : temp_(std::exchange(other.temp_, {})),
      final_(std::move(other.final_)),
      read_fd_(std::move(other.read_fd_)) {}

StagedFile::~StagedFile() {
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

base::Result<void, std::string> StagedFile::commit() {
  if (temp_.empty()) return base::Err{final_ + ": nothing staged"};
  if (::rename(temp_.c_str(), final_.c_str()) != 0) return base::Err{errno_text(final_)};
  temp_.clear();
  return {};
}

base::Result<StagedFile, std::string> StateFolder::stage_file(std::string_view name,
                                                              std::string_view contents) const {
  std::string final_path = file(name);
  std::string tmp = final_path + ".tmp";
  base::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return base::Err{errno_text(tmp)};
  // From here the temporary file is the StagedFile's: removed on every error.
  StagedFile staged(tmp, final_path, base::UniqueFd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)));
  if (staged.read() < 0) return base::Err{errno_text(tmp)};
  std::size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::Err{errno_text(tmp)};
    done += static_cast<std::size_t>(n);
  }
  return staged;
}

base::Result<void, std::string> StateFolder::write_file(std::string_view name,
                                                        std::string_view contents) const {
  auto staged = stage_file(name, contents);
  if (!staged.ok()) return base::Err{staged.error()};
  return staged->commit();
}

base::Result<void, std::string> StateFolder::remove() const {
  // FTW_PHYS: a symlink is removed, never followed; FTW_DEPTH: children before their folder.
  if (::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
    return base::Err{errno_text(path_)};
  return {};
}

}  // namespace abox::engine
