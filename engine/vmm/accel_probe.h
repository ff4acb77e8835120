// Which accelerator QEMU gets: KVM when it really runs this guest kernel,
// TCG (software emulation) otherwise.
//
// A /dev/kvm that opens is not enough: on some hosts (the development
// machines among them) it is a paravirtual KVM on which Debian's kernels hang
// early in boot. The probe boots the image's own kernel under KVM with no
// initramfs and panic=-1: a working KVM reaches the kernel's "VFS: Unable to
// mount root fs" panic in well under a second and QEMU exits (-no-reboot); a
// broken one prints nothing and is killed after kProbeTimeout. The answer is
// cached per (host kernel, QEMU binary, guest kernel) in the cache folder, so
// only the first run on a machine pays for the probe.
#pragma once

#include <chrono>
#include <string>

#include "engine/vmm/vmm.h"

namespace abox::engine {

inline constexpr std::chrono::seconds kProbeTimeout{4};

struct AccelChoice {
  Accel accel = Accel::kTcg;
  bool degraded = false;  // TCG because KVM is missing or does not work
  std::string why;        // one line for the DEGRADED message and the events
};

// requested: "auto", "kvm" or "tcg". "kvm" fails over to nothing: the caller
// reports why (degraded is set and accel is kTcg only for "auto").
AccelChoice choose_accel(const std::string& requested, const std::string& qemu, const std::string& kernel,
                         const std::string& cache_dir);

}  // namespace abox::engine
