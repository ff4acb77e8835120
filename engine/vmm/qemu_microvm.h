// QemuMicrovm: qemu-system-x86_64 -M microvm, the VMM of `abox run`.
//
// microvm has no PCI and no firmware: virtio-mmio devices found through ACPI
// (which must stay on), the kernel booted through its PVH entry point, about
// 2 s to /init under TCG on the development machines. The guest gets one
// virtio-net NIC on abox-net's stream socket (QEMU connects: server=off) and
// one virtio-serial port named "ctl" on the supervisor's socket, a
// virtio-rng (so the guest's getrandom() never waits at boot), and the
// image's disks as virtio-blk (a read-only root, the instance's writable
// layer); nothing else (-nodefaults, no monitor, no display, no user config). QEMU's own
// seccomp filter is on (-sandbox: no spawning, no privilege changes), and
// -no-reboot makes the guest's power-off end QEMU.
#pragma once

#include "engine/vmm/vmm.h"

namespace abox::engine {

class QemuMicrovm final : public Vmm {
 public:
  // program: the qemu-system-x86_64 to run (absolute path).
  explicit QemuMicrovm(std::string program) : program_(std::move(program)) {}
  std::string_view name() const override { return "qemu-microvm"; }
  base::Result<ChildSpec, std::string> command(const VmSpec& spec) const override;

 private:
  std::string program_;
};

// The host's TSC rate in kHz (from /proc/cpuinfo), 0 when unknown. Under TCG
// the guest kernel's own calibration sometimes hangs: tsc_early_khz= avoids it.
unsigned host_tsc_khz();

}  // namespace abox::engine
