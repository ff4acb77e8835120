#include "engine/image/image_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "base/byte_reader.h"
#include "base/event_log.h"
#include "base/sha256.h"
#include "base/unique_fd.h"
#include "engine/process/child_process.h"
#include "engine/process/pipe_reader.h"

namespace abox::engine {
namespace fs = std::filesystem;
namespace {

std::string hex(std::span<const std::uint8_t> d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (auto b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

base::Result<void, std::string> hash_file(base::Sha256& h, const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return base::Err{path + ": " + std::strerror(errno)};
  std::vector<std::uint8_t> buf(1 << 16);
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Err{path + ": " + std::strerror(errno)};
    if (n == 0) return {};
    h.update(std::span(buf.data(), static_cast<std::size_t>(n)));
  }
}

std::map<std::string, std::string> read_meta(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::uint64_t dir_bytes(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

bool valid_image_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

}  // namespace

std::string ImageStore::default_root() {
  std::string cache = default_cache_dir();
  return cache.empty() ? "" : cache + "/images";
}

std::vector<std::string> ImageStore::recipes() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(layout_.recipes_dir, ec)) {
    if (e.is_directory(ec) && fs::exists(e.path() / "build.sh", ec))
      out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ImageStore::recipe_env() const {
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "LC_ALL=C",
                                  "BOX_GUEST=" + layout_.box_guest,
                                  "BUSYBOX=" + find_program("busybox"),
                                  "KERNEL_DIR=" + layout_.kernel_dir,
                                  "MODULES_LIST=" + layout_.modules_list};
  // What the operator's machine needs to reach Debian's mirror and the npm
  // registry (a home for the caches, a proxy, a CA of its own, a mirror of
  // its own, the recipe's cache settings) passes through; nothing else of
  // abox's environment does.
  static constexpr std::string_view kPassed[] = {"HOME",
                                                 "NODE_EXTRA_CA_CERTS",
                                                 "SSL_CERT_FILE",
                                                 "SSL_CERT_DIR",
                                                 "CURL_CA_BUNDLE",
                                                 "REQUESTS_CA_BUNDLE",
                                                 "http_proxy",
                                                 "https_proxy",
                                                 "no_proxy",
                                                 "HTTP_PROXY",
                                                 "HTTPS_PROXY",
                                                 "NO_PROXY",
                                                 "XDG_CACHE_HOME",
                                                 "ABOX_IMAGE_CACHE",
                                                 "ABOX_DEBIAN_MIRROR",
                                                 "ABOX_DEBIAN_SECURITY",
                                                 "ABOX_DEBIAN_TREE_MAX_AGE_DAYS"};
  for (auto name : kPassed) {
    if (const char* v = std::getenv(std::string(name).c_str())) env.push_back(std::string(name) + "=" + v);
  }
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("npm_config_") || kv.starts_with("NPM_CONFIG_")) env.emplace_back(kv);
  }
  return env;
}

std::string ImageRecipe::text() const {
  std::string t = recipe;
  for (const auto& o : options) t += " " + o;
  return t;
}

ImageRecipe ImageStore::recipe_of(const std::string& name) const {
  auto meta = read_meta(root_ + "/" + name + "/image.meta");
  ImageRecipe r{name, {}};
  if (!meta["recipe"].empty()) {
    std::istringstream words(meta["recipe"]);
    words >> r.recipe;
    std::string w;
    while (words >> w) r.options.push_back(w);
  }
  return r;
}

base::Result<std::vector<std::string>, std::string> ImageStore::inputs(const ImageRecipe& r) const {
  const std::string& name = r.recipe;
  if (!valid_image_name(name)) return base::Err{"recipe name '" + name + "': use 1-64 of A-Z a-z 0-9 . _ -"};
  std::string recipe = layout_.recipes_dir + "/" + name + "/build.sh";
  std::error_code ec;
  if (!fs::exists(recipe, ec)) {
    std::string known;
    for (const auto& known_recipe : recipes()) known += (known.empty() ? "" : ", ") + known_recipe;
    return base::Err{"no recipe named '" + name + "' (in " + layout_.recipes_dir +
                     "; known: " + (known.empty() ? "none" : known) + ")"};
  }
  // The recipe names what it is made from (one source of truth); the kernel
  // is copied beside its initramfs here, so it is an input too.
  auto out = make_pipe();
  auto null = open_dev_null();
  ChildSpec spec;
  spec.program = find_program("bash");
  spec.argv = {spec.program, recipe};
  spec.argv.insert(spec.argv.end(), r.options.begin(), r.options.end());
  spec.argv.push_back("--print-inputs");
  spec.env = recipe_env();
  spec.fds = {{0, null.get()}, {1, out.write.get()}, {2, out.write.get()}};
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) return base::Err{"could not run the recipe: " + child.error()};
  out.write.reset();
  std::vector<std::string> paths;
  std::string last;
  LineSplitter lines(4096, [&](std::string_view l) {
    last = std::string(l);
    if (!l.empty()) paths.emplace_back(l);
  });
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out.read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    lines.feed(std::span(reinterpret_cast<const std::uint8_t*>(buf), static_cast<std::size_t>(n)));
  }
  lines.finish();
  auto status = child->wait();
  if (status.signalled || status.value != 0) {
    std::string hint =
        last.find("box-guest") != std::string::npos ? " (build it: cmake --build build --target box-guest)"
        : last.find("kernel") != std::string::npos  ? " (scripts/setup.sh fetches the guest kernel)"
                                                    : "";
    return base::Err{"image " + name + ": " + last + hint};
  }
  paths.push_back(layout_.kernel_dir + "/vmlinux");
  paths.push_back(layout_.kernel_dir + "/VERSION");
  for (const auto& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return base::Err{"image " + name + ": missing input " + p};
  }
  return paths;
}

std::string ImageStore::stat_keys(const std::vector<std::string>& in) const {
  std::string keys;
  for (const auto& p : in) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    keys += p + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
            std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return keys;
}

base::Result<std::string, std::string> ImageStore::content_hash(const std::vector<std::string>& in,
                                                                const ImageRecipe& recipe) const {
  base::Sha256 h;
  // The recipe and its options first: the same files with other packages are another image.
  std::string head = recipe.text() + '\0';
  h.update(base::as_bytes(head));
  for (const auto& p : in) {
    // The file's name (not where it sits on this machine), its size and its
    // bytes: the same inputs give the same hash on any machine, and no two
    // different lists of files give the same stream.
    struct stat st {};
    ::stat(p.c_str(), &st);
    std::string file_head = p.substr(p.rfind('/') + 1) + '\0' + std::to_string(st.st_size) + '\0';
    h.update(base::as_bytes(file_head));
    if (auto r = hash_file(h, p); !r.ok()) return base::Err{r.error()};
  }
  return hex(h.finish());
}

ImageFreshness ImageStore::freshness(const std::string& name) const {
  std::string dir = root_ + "/" + name;
  auto meta = read_meta(dir + "/image.meta");
  if (meta.empty()) return ImageFreshness::kMissing;
  // The recorded inputs as they are now: a stat() each, no recipe run.
  std::vector<std::string> recorded;
  std::string list = meta["inputs"];
  for (std::size_t at = 0; at < list.size();) {
    auto end = list.find(';', at);
    if (end == std::string::npos) break;
    std::string entry = list.substr(at, end - at);
    auto colon = entry.find(':');
    recorded.push_back(entry.substr(0, colon));
    at = end + 1;
  }
  if (recorded.empty() || meta["layout"] != layout_key()) return ImageFreshness::kStale;
  return meta["inputs"] == stat_keys(recorded) ? ImageFreshness::kCurrent : ImageFreshness::kStale;
}

std::string ImageStore::layout_key() const {
  return layout_.recipes_dir + "|" + layout_.box_guest + "|" + layout_.kernel_dir + "|" +
         layout_.modules_list;
}

base::Result<ImageInfo, std::string> ImageStore::find(const std::string& name) const {
  if (!valid_image_name(name)) return base::Err{"image name '" + name + "': use 1-64 of A-Z a-z 0-9 . _ -"};
  std::string dir = root_ + "/" + name;
  auto meta = read_meta(dir + "/image.meta");
  if (meta.empty())
    return base::Err{"no image named '" + name + "' (build it: abox image build " + name + ")"};
  ImageInfo info;
  info.name = name;
  info.dir = dir;
  info.kernel = dir + "/vmlinux";
  info.initramfs = dir + "/" + meta["initramfs"];
  if (!meta["root_disk"].empty()) info.root_disk = dir + "/" + meta["root_disk"];
  info.hash = meta["hash"];
  info.built = meta["built"];
  info.kernel_version = meta["kernel"];
  info.bytes = dir_bytes(dir);
  return info;
}

base::Result<ImageInfo, std::string> ImageStore::build(const std::string& name, const ImageRecipe& r,
                                                       const Progress& progress) const {
  if (!valid_image_name(name)) return base::Err{"image name '" + name + "': use 1-64 of A-Z a-z 0-9 . _ -"};
  auto in = inputs(r);
  if (!in.ok()) return base::Err{in.error()};
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) return base::Err{root_ + ": " + ec.message()};

  progress("hashing the recipe's inputs");
  auto hash = content_hash(*in, r);
  if (!hash.ok()) return base::Err{hash.error()};

  std::string tmpl = root_ + "/.build-" + name + "-XXXXXX";
  std::vector<char> tmp_buf(tmpl.begin(), tmpl.end());
  tmp_buf.push_back('\0');
  if (::mkdtemp(tmp_buf.data()) == nullptr) return base::Err{tmpl + ": " + std::strerror(errno)};
  std::string tmp(tmp_buf.data());
  auto cleanup = [&] { fs::remove_all(tmp, ec); };

  std::string recipe = layout_.recipes_dir + "/" + r.recipe;
  auto out = make_pipe();
  auto null = open_dev_null();
  ChildSpec spec;
  spec.program = find_program("bash");
  spec.argv = {spec.program, recipe + "/build.sh"};
  spec.argv.insert(spec.argv.end(), r.options.begin(), r.options.end());
  spec.argv.push_back(tmp);
  spec.env = recipe_env();
  spec.fds = {{0, null.get()}, {1, out.write.get()}, {2, out.write.get()}};
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) {
    cleanup();
    return base::Err{"could not run the recipe: " + child.error()};
  }
  out.write.reset();
  std::string last;
  LineSplitter lines(4096, [&](std::string_view l) {
    last = std::string(l);
    progress(l);
  });
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out.read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    lines.feed(std::span(reinterpret_cast<const std::uint8_t*>(buf), static_cast<std::size_t>(n)));
  }
  lines.finish();
  ExitStatus status = child->wait();
  if (status.signalled || status.value != 0) {
    cleanup();
    return base::Err{"the recipe " + recipe + "/build.sh " + status.describe() +
                     (last.empty() ? "" : ": " + last)};
  }
  std::string initramfs;
  for (const char* candidate : {"initramfs.cpio", "initramfs.cpio.gz"}) {
    if (fs::exists(tmp + "/" + candidate, ec)) initramfs = candidate;
  }
  if (initramfs.empty()) {
    cleanup();
    return base::Err{"the recipe " + recipe + "/build.sh made no initramfs.cpio"};
  }
  progress("copying the kernel");
  fs::copy_file(layout_.kernel_dir + "/vmlinux", tmp + "/vmlinux", fs::copy_options::overwrite_existing, ec);
  if (ec) {
    cleanup();
    return base::Err{"copying the kernel: " + ec.message()};
  }
  std::ostringstream meta;
  std::string root_disk = fs::exists(tmp + "/rootfs.ext4", ec) ? "rootfs.ext4" : "";
  meta << "name=" << name << "\nrecipe=" << r.text() << "\nhash=" << *hash << "\ninitramfs=" << initramfs
       << "\nroot_disk=" << root_disk
       << "\nbuilt=" << base::format_utc_millis(std::chrono::system_clock::now())
       << "\nkernel=" << first_line(layout_.kernel_dir + "/VERSION") << "\nlayout=" << layout_key()
       << "\ninputs=" << stat_keys(*in) << "\n";
  {
    std::ofstream f(tmp + "/image.meta", std::ios::trunc);
    f << meta.str();
    if (!f) {
      cleanup();
      return base::Err{tmp + "/image.meta: could not write"};
    }
  }
  ::chmod(tmp.c_str(), 0755);
  std::string dir = root_ + "/" + name;
  std::string old = root_ + "/.old-" + name + "-" + std::to_string(::getpid());
  bool had_old = fs::exists(dir, ec);
  if (had_old) fs::rename(dir, old, ec);
  fs::rename(tmp, dir, ec);
  if (ec) {
    if (had_old) fs::rename(old, dir, ec);
    cleanup();
    return base::Err{"could not put the image in place at " + dir};
  }
  if (had_old) fs::remove_all(old, ec);
  progress("built " + name + " (" + hash->substr(0, 12) + ")");
  return find(name);
}

base::Result<ImageInfo, std::string> ImageStore::ensure(const std::string& name,
                                                        const Progress& progress) const {
  ImageRecipe recipe = recipe_of(name);
  switch (freshness(name)) {
    case ImageFreshness::kCurrent:
      return find(name);
    case ImageFreshness::kMissing:
      progress("image " + name + " is not built yet: building it now");
      break;
    case ImageFreshness::kStale: {
      // Cached by content: inputs touched but not changed (a rebuild that
      // made the same box-guest) need no new image, only a new record.
      auto in = inputs(recipe);
      auto info = find(name);
      if (in.ok() && info.ok()) {
        auto hash = content_hash(*in, recipe);
        if (hash.ok() && *hash == info->hash) {
          auto meta = read_meta(info->dir + "/image.meta");
          meta["inputs"] = stat_keys(*in);
          meta["layout"] = layout_key();
          std::string tmp = info->dir + "/image.meta.tmp";
          {
            std::ofstream f(tmp, std::ios::trunc);
            for (const auto& [k, v] : meta) f << k << '=' << v << '\n';
          }
          if (::rename(tmp.c_str(), (info->dir + "/image.meta").c_str()) == 0) return info;
        }
      }
      progress("image " + name + " is older than its recipe's inputs: building it again");
      break;
    }
  }
  return build(name, recipe, progress);
}

std::vector<ImageInfo> ImageStore::list() const {
  std::vector<ImageInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_directory(ec)) continue;
    if (auto info = find(name); info.ok()) out.push_back(std::move(info).value());
  }
  std::sort(out.begin(), out.end(), [](const ImageInfo& a, const ImageInfo& b) { return a.name < b.name; });
  return out;
}

base::Result<void, std::string> ImageStore::remove(const std::string& name) const {
  auto info = find(name);
  if (!info.ok()) return base::Err{info.error()};
  std::error_code ec;
  fs::remove_all(info->dir, ec);
  if (ec) return base::Err{info->dir + ": " + ec.message()};
  return {};
}

}  // namespace abox::engine
