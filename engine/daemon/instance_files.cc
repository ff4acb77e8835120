#include "engine/daemon/instance_files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/json.h"
#include "engine/process/child_process.h"

namespace abox::engine {

namespace json = boost::json;

base::Result<json::object, std::string> read_json_object(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return base::Err{path + ": " + std::strerror(errno)};
  std::string text(kMaxRecordBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Err{path + ": " + std::strerror(errno)};
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxRecordBytes) return base::Err{path + ": larger than " + std::to_string(kMaxRecordBytes)};
  text.resize(got);
  std::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return base::Err{path + ": not a JSON object"};
  return std::move(v.get_object());
}

std::string detached_config_json(const DetachedConfig& c) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object().field("v", 1).key("args").begin_array();
  for (const auto& a : c.args) w.value(a);
  w.end_array().field("cwd", c.cwd).field("term", c.term).field("lang", c.lang).field("boots", c.boots);
  w.end_object();
  js.push_back('\n');
  return js;
}

base::Result<DetachedConfig, std::string> read_detached_config(const std::string& folder) {
  auto o = read_json_object(folder + "/config.json");
  if (!o.ok()) return base::Err{o.error()};
  DetachedConfig c;
  auto* args = o->if_contains("args");
  if (args == nullptr || !args->is_array()) return base::Err{folder + "/config.json: no args"};
  for (const auto& a : args->get_array()) {
    if (!a.is_string()) return base::Err{folder + "/config.json: args must be strings"};
    c.args.emplace_back(a.get_string());
  }
  auto str = [&](const char* k) -> std::string {
    auto* v = o->if_contains(k);
    return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
  };
  c.cwd = str("cwd");
  c.term = str("term");
  c.lang = str("lang");
  if (auto* b = o->if_contains("boots"); b != nullptr && b->is_uint64()) c.boots = b->get_uint64();
  if (auto* b = o->if_contains("boots"); b != nullptr && b->is_int64() && b->get_int64() >= 0)
    c.boots = static_cast<std::uint64_t>(b->get_int64());
  return c;
}

std::string shim_record_json(const ShimRecord& r) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object()
      .field("pid", static_cast<std::int64_t>(r.pid))
      .field("start_ticks", r.start_ticks)
      .end_object();
  js.push_back('\n');
  return js;
}

base::Result<ShimRecord, std::string> read_shim_record(const std::string& folder) {
  auto o = read_json_object(folder + "/shim.json");
  if (!o.ok()) return base::Err{o.error()};
  ShimRecord r;
  auto* pid = o->if_contains("pid");
  auto* ticks = o->if_contains("start_ticks");
  if (pid == nullptr || !pid->is_int64() || pid->get_int64() <= 1 || pid->get_int64() > (1 << 22) ||
      ticks == nullptr || !(ticks->is_uint64() || ticks->is_int64()))
    return base::Err{folder + "/shim.json: no valid pid and start_ticks"};
  r.pid = static_cast<pid_t>(pid->get_int64());
  r.start_ticks = ticks->is_uint64() ? ticks->get_uint64() : static_cast<std::uint64_t>(ticks->get_int64());
  return r;
}

base::UniqueFd open_shim_pidfd(const ShimRecord& r) {
  if (r.pid <= 1) return {};
  base::UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, r.pid, 0)));
  if (!fd) return {};
  // Checked after the pidfd exists: if the start time matches now, the pidfd
  // holds the process that had it (a pid is reused only after the old one is reaped).
  if (process_start_ticks(r.pid) != r.start_ticks) return {};
  // A pidfd is readable once its process has ended: a zombie that its parent
  // (init, for a shim) has not reaped yet still has its pid and start time.
  pollfd p{fd.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return {};
  return fd;
}

bool process_alive(pid_t pid, std::uint64_t start_ticks) {
  return start_ticks != 0 && static_cast<bool>(open_shim_pidfd(ShimRecord{pid, start_ticks}));
}

std::uint64_t process_rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

void append_event(const std::string& folder, const std::string& name, std::string_view kind,
                  std::initializer_list<base::EventField> fields) {
  base::UniqueFd ev(::open((folder + "/events.jsonl").c_str(),
                           O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!ev) return;
  base::EventLog log(name, [&ev](std::string_view line) {
    ssize_t ignored = ::write(ev.get(), line.data(), line.size());
    (void)ignored;
    return true;
  });
  log.emit(kind, fields);
}

}  // namespace abox::engine
