// Vmm: what a virtual machine monitor driver implements. A driver turns a
// typed VmSpec into the ChildSpec that starts that VMM; the supervisor starts,
// watches and stops it like any other child (by pidfd).
//
// Invariants every driver keeps (tests/engine/qemu_test.cc checks QEMU's):
// the command line holds nothing secret (no key, nonce or token: those travel
// over the control channel after boot), the guest's only NIC is the stream
// socket of its own abox-net, its only other channel the control socket, and
// the VMM exits when the guest powers off.
//
// A second driver (Firecracker, cloud-hypervisor) is one more file: its
// command(), plus whatever it needs to be told after start (Firecracker takes
// its machine over an API socket, and has no stream netdev: it would need
// abox-net's AF_PACKET link on a tap). docs/development.md says more.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/process/child_process.h"

namespace abox::engine {

enum class Accel { kKvm, kTcg };
std::string_view accel_name(Accel a);

struct VmDisk {
  std::string path;  // a raw disk image
  bool read_only = true;
};

struct VmSpec {
  std::string name;    // the instance's name (the VMM's process name)
  std::string kernel;  // an uncompressed PVH vmlinux
  std::string initramfs;
  std::vector<VmDisk> disks;  // virtio-blk, in order (the guest finds them by filesystem label)
  unsigned cpus = 1;
  unsigned memory_mib = 512;
  Accel accel = Accel::kTcg;
  std::string net_socket;                // abox-net run --stream's socket: the only NIC
  std::string control_socket;            // the supervisor's listener: the control port "ctl"
  std::vector<std::string> kernel_args;  // extra words for the kernel command line (never a secret)
  // The VMM's stdin, stdout (the guest's serial console) and stderr.
  int stdin_fd = -1;
  int console_fd = -1;
  int stderr_fd = -1;
};

class Vmm {
 public:
  virtual ~Vmm() = default;
  virtual std::string_view name() const = 0;
  virtual base::Result<ChildSpec, std::string> command(const VmSpec& spec) const = 0;
};

}  // namespace abox::engine
