#include "engine/cli/machine_setup.h"

#include <unistd.h>

#include "engine/image/image_store.h"
#include "engine/layout.h"
#include "engine/process/child_process.h"
#include "engine/vmm/accel_probe.h"

namespace abox::engine {

std::string prepare_machine(InstanceConfig& c, const std::string& image_name, const std::string& accel,
                            std::string_view prog, std::ostream& err) {
  Layout layout = Layout::discover();
  c.abox = layout.self;
  c.abox_net = layout.abox_net;
  c.qemu = layout.qemu;
  c.tar = find_program("tar");
  c.mkfs = find_program("mkfs.ext4");
  if (!c.copy_in.empty() && c.tar.empty()) return "--copy-in needs tar on this host";
  if (c.qemu.empty()) return "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)";
  if (::access(c.abox_net.c_str(), X_OK) != 0)
    return "abox-net not found at " + c.abox_net + " (set ABOX_NET)";

  // The image: the agent image once it is built, minimal otherwise (built on first use).
  ImageStore images(ImageStore::default_root(), layout);
  c.image_name = image_name.empty() ? (images.find("debian").ok() ? "debian" : "minimal") : image_name;
  auto image =
      images.ensure(c.image_name, [&](std::string_view line) { err << "abox image: " << line << '\n'; });
  if (!image.ok()) return image.error();
  c.kernel = image->kernel;
  c.initramfs = image->initramfs;
  c.root_disk = image->root_disk;
  if (!c.root_disk.empty() && c.mkfs.empty())
    return "the image " + c.image_name + " needs mkfs.ext4 on this host (Debian: e2fsprogs)";

  auto choice = choose_accel(accel, c.qemu, c.kernel, default_cache_dir());
  if (accel == "kvm" && choice.degraded) return "--accel kvm: " + choice.why;
  c.accel = choice.accel;
  if (choice.degraded) {
    err << prog << ": DEGRADED: " << choice.why
        << "; running the guest on TCG (software emulation): it boots in seconds instead of a fraction of "
           "one, "
           "and runs several times slower\n";
  }
  return "";
}

}  // namespace abox::engine
