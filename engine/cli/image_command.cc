#include "engine/cli/image_command.h"

#include <iomanip>
#include <iostream>
#include <sstream>

#include "base/json.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/options.h"
#include "engine/image/image_store.h"

namespace abox::engine {
namespace {

constexpr std::string_view kUsage =
    "usage: abox image build RECIPE [--name NAME] [--add-package PKG]... [--add-npm PKG]...\n"
    "       abox image ls [--json]\n"
    "       abox image rm NAME...\n"
    "\n"
    "Guest images live in $XDG_CACHE_HOME/abox/images (default ~/.cache/abox/images),\n"
    "one folder each: the kernel, the initramfs with box-guest, and what they were built\n"
    "from. `build` makes an image from a recipe (guest/image/RECIPE/), showing each\n"
    "step; an image is rebuilt when any of its inputs changed (abox run does that itself).\n"
    "Recipes: minimal (busybox and box-guest), debian (Debian 12 with curl, git, ssh,\n"
    "python3 and requests, node and npm; the default image of abox run once built).\n"
    "\n"
    "Options:\n"
    "  --name NAME          build: the image's name (default: the recipe's); needed with --add-*\n"
    "  --add-package PKG    build: a Debian package more (debian recipe)\n"
    "  --add-npm PKG        build: an npm package more, installed at build time on this host\n"
    "                       from the registry (scripts ignored), never inside a guest\n"
    "  --json   ls: {\"images\":[{\"name\",\"hash\",\"built\",\"bytes\",\"kernel\",\"current\",\"dir\"}]}\n"
    "\n"
    "Exit status: 0 done, 2 usage error, 3 the build or removal failed (the message says why).\n";

int usage_error(const std::string& message) {
  std::cerr << "abox image: " << message << " (see 'abox image --help')\n";
  return kExitUsage;
}

std::string human_bytes(std::uint64_t n) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << static_cast<double>(n) / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

}  // namespace

int run_image_command(std::span<const std::string_view> args) {
  static constexpr OptionSpec kOptions[] = {
      {"json", 0, false}, {"name", 0, true}, {"add-package", 0, true}, {"add-npm", 0, true}};
  auto parsed = parse_options(args, kOptions, false);
  if (!parsed.ok()) return usage_error(parsed.error());
  if (parsed->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  auto& pos = parsed->positionals;
  if (pos.empty()) return usage_error("which? build, ls or rm");
  ImageStore store(ImageStore::default_root(), Layout::discover());
  if (store.root().empty()) {
    std::cerr << "abox image: neither XDG_CACHE_HOME nor HOME is set\n";
    return kExitFailed;
  }
  const std::string& verb = pos[0];
  if (verb == "build") {
    if (pos.size() != 2) return usage_error("build takes one RECIPE");
    ImageRecipe recipe{pos[1], {}};
    for (const auto& p : parsed->all("add-package")) {
      if (p.empty() || p[0] == '-' || p.find_first_of(" \t/") != std::string::npos)
        return usage_error("--add-package " + p + ": a Debian package name");
      recipe.options.push_back("--add-package");
      recipe.options.push_back(p);
    }
    for (const auto& p : parsed->all("add-npm")) {
      if (p.empty() || p[0] == '-' || p.find_first_of(" \t") != std::string::npos)
        return usage_error("--add-npm " + p +
                           ": an npm package name (with @scope/ and @version if you like)");
      recipe.options.push_back("--add-npm");
      recipe.options.push_back(p);
    }
    std::string name = parsed->last("name").value_or(recipe.recipe);
    if (!recipe.options.empty() && name == recipe.recipe)
      return usage_error("--add-package and --add-npm make a custom image: give it a --name");
    auto built =
        store.build(name, recipe, [](std::string_view line) { std::cerr << "abox image: " << line << '\n'; });
    if (!built.ok()) {
      std::cerr << "abox image: " << built.error() << '\n';
      return kExitFailed;
    }
    std::cout << built->name << ' ' << built->hash.substr(0, 12) << ' ' << human_bytes(built->bytes) << ' '
              << built->dir << '\n';
    return kExitOk;
  }
  if (verb == "ls") {
    if (pos.size() != 1) return usage_error("ls takes no NAME");
    auto images = store.list();
    if (parsed->has("json")) {
      std::string js;
      base::JsonWriter w(js);
      w.begin_object().key("images").begin_array();
      for (const auto& i : images) {
        w.begin_object()
            .field("name", i.name)
            .field("hash", i.hash)
            .field("built", i.built)
            .field("bytes", i.bytes)
            .field("kernel", i.kernel_version)
            .field("current", store.freshness(i.name) == ImageFreshness::kCurrent)
            .field("dir", i.dir)
            .end_object();
      }
      w.end_array().end_object();
      std::cout << js << '\n';
      return kExitOk;
    }
    std::cout << std::left << std::setw(16) << "NAME" << std::setw(14) << "HASH" << std::setw(26) << "BUILT"
              << std::setw(12) << "SIZE"
              << "STATE\n";
    for (const auto& i : images) {
      bool current = store.freshness(i.name) == ImageFreshness::kCurrent;
      std::cout << std::left << std::setw(16) << i.name << std::setw(14) << i.hash.substr(0, 12)
                << std::setw(26) << i.built << std::setw(12) << human_bytes(i.bytes)
                << (current ? "current" : "stale") << '\n';
    }
    return kExitOk;
  }
  if (verb == "rm") {
    if (pos.size() < 2) return usage_error("rm takes at least one NAME");
    int code = kExitOk;
    for (std::size_t i = 1; i < pos.size(); ++i) {
      if (auto r = store.remove(pos[i]); !r.ok()) {
        std::cerr << "abox image: " << r.error() << '\n';
        code = kExitFailed;
      } else {
        std::cout << pos[i] << '\n';
      }
    }
    return code;
  }
  return usage_error("unknown image command '" + verb + "'");
}

}  // namespace abox::engine
