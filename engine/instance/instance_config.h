// InstanceConfig: everything one instance is started from, validated by its
// maker (the `abox run` command line now, the daemon's API later). The
// supervisor reads nothing else: no globals, no environment of its own.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "engine/instance/selftest_plan.h"
#include "engine/vmm/vmm.h"
#include "guest/protocol/messages.h"

namespace abox::engine {

// One --copy-in: the host's file or folder, and the folder in the guest it lands in.
struct CopyIn {
  std::string host_path;
  std::string guest_dir;  // absolute
};

// `abox cp` from a stopped instance: the instance's kept writable layer boots
// again (with its image) only for the guest to make the tar stream; nothing
// runs but box-guest, and the stream goes to fd.
struct CopyOutOnly {
  std::string guest_path;
  int fd = -1;
  std::uint64_t max_bytes = 1ull << 30;
};

struct InstanceConfig {
  std::string name;
  std::string instances_root;    // the state folder is instances_root/name
  std::string policy_file;       // the operator's file: copied into the state folder
  std::string credentials_file;  // the broker's keys ("" without [[broker]] bindings)
  std::string upstream_ca;       // the broker also trusts this CA for providers (tests)

  std::string image_name;
  std::string kernel;     // the image's vmlinux
  std::string initramfs;  // the image's initramfs
  std::string root_disk;  // the image's read-only root (rootfs.ext4), "" for an initramfs-only image
  std::uint64_t disk_bytes = 4ull << 30;  // the instance's writable layer (with a root disk)
  std::string existing_disk;              // use this writable layer, not a new one (copy_out_only)
  std::optional<CopyOutOnly> copy_out_only;
  unsigned cpus = 1;
  unsigned memory_mib = 512;
  Accel accel = Accel::kTcg;

  std::vector<std::string> argv;          // the command, in the guest
  std::vector<guest::EnvEntry> user_env;  // --env, in order
  std::string workdir;                    // "" = /home/agent
  bool attach_stdin = false;
  bool tty = false;             // a pty for the command
  guest::WindowSize window;     // its first size
  std::vector<CopyIn> copy_in;  // before the command starts
  std::string term, lang;       // the operator's TERM and LANG, for the guest

  // --publish: ports of the guest published on the host, each a canonical
  // spec (policy/publish_spec.h, validated by the maker), passed to abox-net.
  std::vector<std::string> publish;

  bool selftest = true;
  SelftestTargets selftest_targets;
  // --ipv6 on: abox-net carries the guest's IPv6 (abox-net run --ipv6 on); the
  // guest's kernel configures itself from the router advertisement (SLAAC).
  bool ipv6 = false;

  std::optional<std::chrono::milliseconds> timeout;       // stop the instance past it
  std::optional<std::chrono::milliseconds> idle_timeout;  // ... or when nothing moved that long
  std::chrono::milliseconds boot_timeout{60000};          // VMM start to box-guest's hello
  std::chrono::milliseconds stop_grace{3000};             // poweroff to a kill of the VMM

  bool keep = false;  // keep the state folder afterwards
  // The state folder exists already (the daemon made it, with config.json in
  // it, or `abox start` boots a stopped instance again): open it, do not create it.
  bool folder_exists = false;

  // Programs.
  std::string abox_net;  // abox-net
  std::string abox;      // this abox, for `abox broker`
  std::string qemu;      // qemu-system-x86_64
  std::string tar;       // the host's tar (--copy-in streams are made with it)
  std::string mkfs;      // mkfs.ext4 (the writable layer)
};

}  // namespace abox::engine
