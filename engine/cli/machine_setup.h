// The parts every command that boots an instance needs, filled into an
// InstanceConfig: the programs (abox, abox-net, QEMU, tar, mkfs.ext4), the
// image (built or rebuilt when it must be, with progress on `err`), and the
// accelerator (KVM when its probe says so, else TCG with a DEGRADED line).
// `abox run` and `abox cp` (from a stopped instance) share it.
#pragma once

#include <ostream>
#include <string>

#include "engine/instance/instance_config.h"

namespace abox::engine {

// image_name "" = the default (debian when built, else minimal). accel: auto,
// kvm or tcg. Returns "" when ready, else what is wrong (for "PROG: WHAT").
std::string prepare_machine(InstanceConfig& c, const std::string& image_name, const std::string& accel,
                            std::string_view prog, std::ostream& err);

}  // namespace abox::engine
