// Layout: where abox's own parts are on this machine: abox-net, box-guest,
// the image recipes and the guest kernel.
//
// Installed (cmake --install): PREFIX/bin/abox and abox-net,
// PREFIX/lib/abox/box-guest, PREFIX/share/abox/{images,guest-kernel,modules.list}.
// A build tree: BUILD/engine/abox, BUILD/netstack/abox-net, BUILD/guest/box-guest,
// and the source tree this build was configured from (guest/image/,
// .cache/guest-kernel/ that scripts/setup.sh fills). The environment
// overrides each: ABOX_NET, ABOX_BOX_GUEST, ABOX_RECIPES_DIR,
// ABOX_GUEST_KERNEL_DIR, ABOX_QEMU.
#pragma once

#include <string>

namespace abox::engine {

struct Layout {
  std::string self;  // this program (abox), for `abox broker`
  std::string abox_net;
  std::string box_guest;
  std::string recipes_dir;   // one folder per image recipe (minimal/, ...)
  std::string kernel_dir;    // vmlinux, modules/, VERSION
  std::string modules_list;  // the kernel modules the guest loads, in order
  std::string qemu;          // qemu-system-x86_64 ("" when not installed)

  static Layout discover();
};

// $XDG_CACHE_HOME/abox, else $HOME/.cache/abox ("" when neither is set).
std::string default_cache_dir();

}  // namespace abox::engine
