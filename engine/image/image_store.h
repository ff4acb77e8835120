// ImageStore: the guest images on this machine, under
// $XDG_CACHE_HOME/abox/images (default ~/.cache/abox/images), one folder each:
//
//   NAME/vmlinux          the guest kernel (PVH, uncompressed)
//   NAME/initramfs.cpio   (or .cpio.gz) the root filesystem, box-guest as PID 1
//   NAME/image.meta       key=value lines: name, content hash of every input,
//                         their sizes and times, when built, the kernel version
//
// An image is built from its recipe, guest/image/NAME/build.sh (installed:
// PREFIX/share/abox/images/NAME/), which names its own inputs
// (`build.sh --print-inputs`: its files, box-guest, busybox, the modules);
// the kernel is one more. The image's hash is the SHA-256 of all of them
// (names and bytes), so a change to any input (box-guest rebuilt, a new
// kernel) makes it stale and `abox run` builds it again; checking costs a
// stat() per input (their sizes and times are kept beside the hash), and an
// input touched but not changed costs a hash, not a build. Builds
// go to a temporary folder and are renamed into place, so a failed or
// interrupted build leaves the old image as it was.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/layout.h"

namespace abox::engine {

struct ImageInfo {
  std::string name;
  std::string dir;
  std::string kernel;
  std::string initramfs;
  std::string root_disk;    // rootfs.ext4 when the image has one (read-only in every instance)
  std::string hash;         // hex SHA-256 of the recipe's inputs
  std::string built;        // RFC 3339
  std::uint64_t bytes = 0;  // on disk
  std::string kernel_version;
};

enum class ImageFreshness { kMissing, kStale, kCurrent };

// What an image is built from: a recipe (guest/image/RECIPE/build.sh) and the
// options it is given (--add-package NAME, --add-npm NAME): a custom image is
// a recipe with options, under a name of its own.
struct ImageRecipe {
  std::string recipe;
  std::vector<std::string> options;
  std::string text() const;  // "debian --add-npm openai", for the hash and image.meta
};

class ImageStore {
 public:
  using Progress = std::function<void(std::string_view line)>;
  ImageStore(std::string root, Layout layout) : root_(std::move(root)), layout_(std::move(layout)) {}

  static std::string default_root();  // default_cache_dir() + "/images"
  const std::string& root() const { return root_; }

  // Recipes this abox can build.
  std::vector<std::string> recipes() const;
  ImageFreshness freshness(const std::string& name) const;
  // The image, when it is built (current or not).
  base::Result<ImageInfo, std::string> find(const std::string& name) const;
  // Builds (or rebuilds) name from a recipe; progress gets one line per step.
  base::Result<ImageInfo, std::string> build(const std::string& name, const ImageRecipe& recipe,
                                             const Progress& progress) const;
  // What name was built from (its image.meta), or the recipe of that name.
  ImageRecipe recipe_of(const std::string& name) const;
  // The image if current; else builds it first.
  base::Result<ImageInfo, std::string> ensure(const std::string& name, const Progress& progress) const;
  std::vector<ImageInfo> list() const;
  base::Result<void, std::string> remove(const std::string& name) const;

 private:
  // Every file the image is made from: what the recipe's --print-inputs names, and the kernel.
  base::Result<std::vector<std::string>, std::string> inputs(const ImageRecipe& recipe) const;
  std::string stat_keys(const std::vector<std::string>& in) const;
  base::Result<std::string, std::string> content_hash(const std::vector<std::string>& in,
                                                      const ImageRecipe& recipe) const;
  std::vector<std::string> recipe_env() const;
  std::string layout_key() const;

  std::string root_;
  Layout layout_;
};

}  // namespace abox::engine
