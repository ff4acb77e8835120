#include "base/drop_privileges.h"

#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::base {

namespace {

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// The highest capability number this kernel knows (PR_CAPBSET_READ fails past it).
int last_capability() {
  int cap = 0;
  while (cap < 64 && ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0) ++cap;
  return cap - 1;
}

}  // namespace

Result<void, std::string> drop_privileges() {
  // Ambient first (it needs no capability), then the bounding set while we
  // may still hold CAP_SETPCAP (a process without it cannot drop, but then
  // it has nothing to regain either: no_new_privs below).
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return Err{errno_text("cannot clear the ambient capabilities", errno)};
  }
  const int last = last_capability();
  for (int cap = 0; cap <= last; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EPERM) {
      return Err{
          errno_text("cannot drop capability " + std::to_string(cap) + " from the bounding set", errno)};
    }
  }
  // uid 0 gets no capabilities back from execve or setuid, and this cannot
  // be undone (EPERM: we never had CAP_SETPCAP, so there is nothing to lock).
  const unsigned long secure = SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP |
                               SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
                               SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, secure, 0, 0, 0) != 0 && errno != EPERM) {
    return Err{errno_text("cannot lock the securebits", errno)};
  }
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    return Err{errno_text("cannot drop the capabilities (capset)", errno)};
  }
  // Check rather than trust: every set must read back empty.
  __user_cap_data_struct now[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, now) != 0) return Err{errno_text("capget", errno)};
  for (const auto& d : now) {
    if (d.effective != 0 || d.permitted != 0 || d.inheritable != 0) {
      return Err{std::string("capabilities are still held after capset")};
    }
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Err{errno_text("cannot set no_new_privs", errno)};
  }
  return {};
}

}  // namespace abox::base
