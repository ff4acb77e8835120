// The control port: the virtio-serial port the host named (QEMU's
// `-device virtserialport,name=ctl`), found without udev. The driver lists
// each port in /sys/class/virtio-ports/vportNpM/ with its name in `name`, and
// devtmpfs makes /dev/vportNpM. QEMU announces a port's name a moment after
// the driver is up, so the port is looked for again every 20 ms until
// `wait_ms` has passed.
//
// Once open, the port is also waited on (the same bound) until the host end
// is connected: until then the driver reports POLLHUP, which the session
// would read as the host going away.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::guest {

// The entry of `class_dir` (e.g. "vport0p1") whose name file holds `name`
// (one trailing newline allowed), or nullopt. Name files over 256 bytes are
// not read past that.
std::optional<std::string> find_virtio_port(const std::string& class_dir, std::string_view name);

struct ControlPortPaths {
  std::string class_dir = "/sys/class/virtio-ports";
  std::string dev_dir = "/dev";
};

// The port, open read-write, non-blocking, close-on-exec, with the host
// connected; or what went wrong.
base::Result<base::UniqueFd, std::string> open_control_port(std::string_view name, int wait_ms,
                                                            const ControlPortPaths& paths = {});

}  // namespace abox::guest
