#include "engine/daemon/cgroup_sweeper.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "helper/wire.h"

namespace abox::engine {

base::Result<void, std::string> CgroupLeftovers::add(const std::string& name) const {
  if (!helper::valid_instance_name(name)) return base::Err{"'" + name + "' is not an instance name"};
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    return base::Err{dir_ + ": " + std::strerror(errno)};
  const std::string path = dir_ + "/" + name;
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return base::Err{path + ": " + std::strerror(errno)};
  // The name must be on disk before the caller may remove the state folder.
  if (::fsync(fd.get()) != 0) return base::Err{path + ": " + std::strerror(errno)};
  return {};
}

void CgroupLeftovers::drop(const std::string& name) const {
  if (helper::valid_instance_name(name)) ::unlink((dir_ + "/" + name).c_str());
}

std::vector<std::string> CgroupLeftovers::names() const {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (helper::valid_instance_name(e->d_name) && e->d_type == DT_REG) out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

SweepResult sweep_cgroups(CgroupHelper& helper, const CgroupLeftovers& leftovers,
                          const std::function<bool(const std::string&)>& is_live) {
  SweepResult r;
  for (const auto& name : leftovers.names()) {
    if (is_live(name)) continue;  // its shim made it again (a new boot); it ends with that one
    auto removed = helper.remove(name);
    const bool gone = removed.ok() || (removed.error().kind == helper::HelperError::Kind::kRefused &&
                                       removed.error().code == helper::ErrorCode::kNotFound);
    if (gone) {
      leftovers.drop(name);
      r.deleted.push_back(name);
    } else if (removed.error().kind == helper::HelperError::Kind::kRefused &&
               removed.error().code == helper::ErrorCode::kBusy) {
      r.busy.push_back(name);
    } else {
      r.kept.push_back(name + ": " + removed.error().to_string());
      // A dead connection answers nothing more in this pass.
      if (removed.error().kind != helper::HelperError::Kind::kRefused) break;
    }
  }
  return r;
}

}  // namespace abox::engine
