#include "engine/vmm/qemu_microvm.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

namespace abox::engine {
namespace {

// A comma in a QEMU option value must be doubled; our paths come from the
// state folder (no commas), but a kernel path is the operator's.
std::string qemu_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

}  // namespace

std::string_view accel_name(Accel a) {
  return a == Accel::kKvm ? "kvm" : "tcg";
}

unsigned host_tsc_khz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) return 0;
    double mhz = std::strtod(line.c_str() + colon + 1, nullptr);
    if (mhz <= 0 || mhz > 100000) return 0;
    return static_cast<unsigned>(std::lround(mhz * 1000));
  }
  return 0;
}

base::Result<ChildSpec, std::string> QemuMicrovm::command(const VmSpec& spec) const {
  if (spec.kernel.empty() || spec.initramfs.empty()) return base::Err{std::string("no kernel or initramfs")};
  if (spec.net_socket.empty() || spec.control_socket.empty())
    return base::Err{std::string("no network or control socket")};
  if (spec.cpus < 1 || spec.cpus > 64) return base::Err{std::string("cpus must be 1-64")};
  if (spec.memory_mib < 64 || spec.memory_mib > 1024 * 1024)
    return base::Err{std::string("memory must be 64 MiB or more")};

  std::string append = "console=ttyS0 quiet panic=-1 reboot=t";
  if (spec.accel == Accel::kTcg) {
    if (unsigned khz = host_tsc_khz(); khz > 0) append += " tsc_early_khz=" + std::to_string(khz);
  }
  for (const auto& a : spec.kernel_args) append += " " + a;

  ChildSpec c;
  c.program = program_;
  // clang-format off
  c.argv = {
      program_,
      "-name", "abox-" + spec.name + ",process=abox-" + spec.name,
      "-M", "microvm",
      "-accel", std::string(accel_name(spec.accel)),
      "-smp", std::to_string(spec.cpus),
      "-m", std::to_string(spec.memory_mib),
      "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
      "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
      "-chardev", "stdio,id=console,signal=off",
      "-serial", "chardev:console",
      "-netdev", "stream,id=net0,server=off,addr.type=unix,addr.path=" + qemu_escape(spec.net_socket),
      "-device", "virtio-net-device,netdev=net0",
      "-device", "virtio-serial-device",
      "-chardev", "socket,id=ctl,path=" + qemu_escape(spec.control_socket) + ",server=off",
      "-device", "virtserialport,chardev=ctl,name=ctl",
      "-device", "virtio-rng-device",
      "-kernel", spec.kernel,
      "-initrd", spec.initramfs,
      "-append", append,
  };
  // clang-format on

  for (std::size_t i = 0; i < spec.disks.size(); ++i) {
    const auto& d = spec.disks[i];
    std::string id = "disk" + std::to_string(i);
    c.argv.push_back("-drive");
    c.argv.push_back("file=" + qemu_escape(d.path) + ",if=none,format=raw,id=" + id +
                     (d.read_only ? ",readonly=on" : ",discard=unmap,detect-zeroes=unmap"));
    c.argv.push_back("-device");
    c.argv.push_back("virtio-blk-device,drive=" + id);
  }
  if (spec.accel == Accel::kKvm) {
    // After -accel: the host's CPU as it is (TCG keeps QEMU's default model).
    c.argv.insert(c.argv.begin() + 7, {"-cpu", "host"});
  }
  c.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  c.fds = {{0, spec.stdin_fd}, {1, spec.console_fd}, {2, spec.stderr_fd}};
  c.kill_with_parent = true;
  c.new_session = true;  // a Ctrl-C on the operator's terminal goes to abox, which stops the guest in order
  return c;
}

}  // namespace abox::engine
