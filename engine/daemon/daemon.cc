#include "engine/daemon/daemon.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>

#include "base/event_log.h"
#include "base/random.h"
#include "engine/cli/options.h"
#include "engine/cli/run_command.h"
#include "engine/daemon/base64.h"
#include "engine/daemon/broker_event_stats.h"
#include "engine/daemon/exec_relay.h"
#include "engine/instance/exec_wire.h"
#include "engine/instance/guest_environment.h"
#include "engine/instance/state_folder.h"
#include "engine/process/child_process.h"
#include "engine/process/pipe_reader.h"
#include "engine/version.h"
#include "policy/publish_spec.h"

namespace abox::engine {

namespace json = boost::json;
using boost::asio::local::stream_protocol;
using namespace std::chrono_literals;

namespace {

constexpr auto kStopBound = 30s;     // SIGTERM to SIGKILL of a shim (the supervisor needs ~10 s at most)
constexpr auto kFollowTick = 200ms;  // how often a follower looks at its file again
constexpr std::size_t kChunk = 48 * 1024;
constexpr std::size_t kMaxEventLine = 64 * 1024;
constexpr auto kSweepRetry = 200ms;  // a busy cgroup: its instance's last processes are dying (PDEATHSIG)
constexpr int kSweepRetries = 100;   // 20 s of them in a row, then until the next ended instance

bool terminal_state(std::string_view s) {
  return s == "stopped" || s == "failed";
}

std::string record_state(const json::object& record) {
  auto* s = record.if_contains("state");
  return s != nullptr && s->is_string() ? std::string(s->get_string()) : std::string("created");
}

std::string random_name() {
  base::SystemRandom r;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string name = "run-";
  std::uint64_t v = r.next_u64();
  for (int i = 0; i < 8; ++i) name += kDigits[(v >> (4 * i)) & 15];
  return name;
}

// A non-negative JSON integer (Boost.JSON reads one that fits as int64).
std::optional<std::uint64_t> as_u64(const json::value* v) {
  if (v == nullptr) return std::nullopt;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
  return std::nullopt;
}

// A process of instance.json's "processes" that still runs: its pid, else 0.
pid_t live_process(const json::value& entry) {
  if (!entry.is_object()) return 0;
  auto pid = as_u64(entry.get_object().if_contains("pid"));
  auto ticks = as_u64(entry.get_object().if_contains("start_ticks"));
  if (!pid || !ticks || *pid > (1u << 22)) return 0;
  return process_alive(static_cast<pid_t>(*pid), *ticks) ? static_cast<pid_t>(*pid) : 0;
}

int pidfd_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

// ---- one connection ----

class Daemon::Client : public std::enable_shared_from_this<Client> {
 public:
  explicit Client(stream_protocol::socket s) : socket(std::move(s)) {}
  stream_protocol::socket socket;
  std::string in;
  std::deque<std::string> out;
  std::size_t queued = 0;
  bool writing = false, gone = false, close_after = false;
  // The execs this connection runs, by their request's id.
  std::map<std::uint64_t, std::shared_ptr<ExecRelay>> execs;

  void end_execs() {
    auto all = std::move(execs);
    execs.clear();
    for (auto& [id, relay] : all) relay->close();
  }

  void send(const json::object& o) {
    std::string line = json::serialize(o);
    line.push_back('\n');
    send_raw(std::move(line));
  }
  void send_raw(std::string line) {
    if (gone) return;
    queued += line.size();
    out.push_back(std::move(line));
    if (!writing) write_next();
  }
  void drain() {
    if (++drained > 16) return;  // at most 16 reads of 4 KiB; then the socket closes with us
    in.resize(4096);
    socket.async_read_some(boost::asio::buffer(in),
                           [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                             if (!ec) self->drain();
                           });
  }
  int drained = 0;
  void write_next() {
    if (out.empty() || gone) {
      writing = false;
      if (close_after && !gone) {
        // The refusal is out: no more from us; what the peer already sent is
        // read and dropped (closing with it unread would reset the
        // connection, and the peer could lose the refusal), bounded.
        boost::system::error_code ignored;
        socket.shutdown(stream_protocol::socket::shutdown_send, ignored);
        gone = true;
        drain();
      }
      return;
    }
    writing = true;
    boost::asio::async_write(socket, boost::asio::buffer(out.front()),
                             [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                               self->queued -= self->out.front().size();
                               self->out.pop_front();
                               if (ec) {
                                 self->gone = true;
                                 self->out.clear();
                                 self->queued = 0;
                               }
                               self->write_next();
                             });
  }
};

namespace {

json::object ok_reply(std::uint64_t id) {
  return json::object{{"id", id}, {"ok", true}};
}

void reply_error(const std::shared_ptr<Daemon::Client>& c, std::uint64_t id, std::string message) {
  c->send(json::object{{"id", id}, {"ok", false}, {"error", message}});
}

}  // namespace

// ---- a logs or events stream ----

struct Daemon::Follow {
  explicit Follow(boost::asio::io_context& io) : timer(io) {}
  std::shared_ptr<Client> client;
  std::uint64_t id = 0;
  std::string name;
  bool events = false, follow = false, last_pass = false;
  std::deque<std::string> paths;  // files still to read, the live one last
  std::string live;               // the file that grows (and may rotate)
  base::UniqueFd fd;
  ino_t ino = 0;
  std::string partial;  // events: a line not yet ended
  std::uint64_t skipped = 0;
  boost::asio::steady_timer timer;
};

Daemon::Daemon(boost::asio::io_context& io, Options options)
    : io_(io), options_(std::move(options)), leftovers_(options_.paths.dir + "/cgroup-leftovers") {}

Daemon::~Daemon() {
  *alive_ = false;
}

base::Result<void, std::string> Daemon::start() {
  lock_.reset(::open(options_.paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock_) return base::Err{options_.paths.lock + ": " + std::strerror(errno)};
  if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0)
    return base::Err{std::string("another abox daemon of this user runs (") + options_.paths.lock +
                     " is locked)"};
  adopt_all();

  ::unlink(options_.paths.socket.c_str());
  boost::system::error_code ec;
  acceptor_ = std::make_unique<stream_protocol::acceptor>(io_);
  acceptor_->open(stream_protocol(), ec);
  // Made 0600 from its birth: nobody else can connect between bind and chmod.
  mode_t old = ::umask(0177);
  if (!ec) acceptor_->bind(stream_protocol::endpoint(options_.paths.socket), ec);
  ::umask(old);
  if (!ec) acceptor_->listen(64, ec);
  if (ec) return base::Err{options_.paths.socket + ": " + ec.message()};
  accept();
  return {};
}

void Daemon::close() {
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    ::unlink(options_.paths.socket.c_str());
  }
}

// ---- the registry: shims found, started, watched ----

void Daemon::adopt_all() {
  DIR* dir = ::opendir(options_.instances_root.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    if (valid_instance_name(e->d_name) && e->d_type == DT_DIR) names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  for (const auto& name : names) {
    std::string f = folder(name);
    auto shim = read_shim_record(f);
    if (shim.ok()) {
      base::UniqueFd pidfd = open_shim_pidfd(*shim);
      if (pidfd) {
        std::cerr << "abox daemon: adopted " << name << " (shim pid " << shim->pid << ")\n";
        watch(name, *shim, std::move(pidfd));
        continue;
      }
      mark_failed_unless_ended(
          name, "its shim (pid " + std::to_string(shim->pid) + ") was gone when the daemon started");
    } else if (::access((f + "/config.json").c_str(), F_OK) == 0) {
      mark_failed_unless_ended(name, "its shim never started");
    }
    note_cgroup_leftover(name);
  }
  sweep_cgroups_soon();
}

void Daemon::watch(std::string name, ShimRecord record, base::UniqueFd pidfd) {
  auto shim = std::make_unique<Shim>();
  shim->name = name;
  shim->record = record;
  shim->pidfd = std::make_unique<boost::asio::posix::stream_descriptor>(io_, pidfd.release());
  shim->pidfd->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          [this, name, alive = alive_](const boost::system::error_code& ec) {
                            if (!*alive || ec == boost::asio::error::operation_aborted) return;
                            on_shim_exit(name);
                          });
  shims_[name] = std::move(shim);
}

void Daemon::adopt_if_alive(const std::string& name) {
  if (shims_.count(name) != 0) return;
  auto shim = read_shim_record(folder(name));
  if (!shim.ok()) return;
  base::UniqueFd pidfd = open_shim_pidfd(*shim);
  if (!pidfd) return;
  std::cerr << "abox daemon: adopted " << name << " (shim pid " << shim->pid << ", found late)\n";
  watch(name, *shim, std::move(pidfd));
}

void Daemon::on_shim_exit(const std::string& name) {
  auto it = shims_.find(name);
  if (it == shims_.end()) return;
  auto shim = std::move(it->second);
  shims_.erase(it);
  mark_failed_unless_ended(
      name, "its shim (pid " + std::to_string(shim->record.pid) + ") ended before the instance did");
  // Listed before on_exit (rm) may remove the folder that names the cgroup.
  note_cgroup_leftover(name);
  sweep_cgroups_soon();
  for (auto& f : shim->on_exit) f();
}

void Daemon::mark_failed_unless_ended(const std::string& name, const std::string& reason) {
  std::string f = folder(name);
  auto record = read_json_object(f + "/instance.json");
  json::object o = record.ok() ? std::move(record).value() : json::object{{"name", name}};
  if (terminal_state(record_state(o))) return;
  o["state"] = "failed";
  o["outcome"] = "crashed";
  o["reason"] = reason;
  auto folder_ok = StateFolder::open(options_.instances_root, name);
  if (!folder_ok.ok()) return;
  (void)folder_ok->write_file("instance.json", json::serialize(o) + "\n");
  append_event(f, name, "instance_failed",
               {{"source", "daemon"}, {"outcome", "crashed"}, {"reason", reason}});
  std::cerr << "abox daemon: " << name << " failed: " << reason << '\n';
}

void Daemon::note_cgroup_leftover(const std::string& name) {
  if (shims_.count(name) != 0) return;
  if (!read_cgroup_record(folder(name)).may_exist()) return;
  if (auto added = leftovers_.add(name); !added.ok())
    std::cerr << "abox daemon: " << name << ": cannot list its cgroup for deletion: " << added.error()
              << '\n';
}

void Daemon::sweep_cgroups_soon() {
  if (sweep_scheduled_) return;
  sweep_scheduled_ = true;
  if (!sweep_timer_) sweep_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  sweep_timer_->expires_after(sweep_busy_rounds_ == 0 ? 0ms : kSweepRetry);
  sweep_timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    sweep_scheduled_ = false;
    sweep_cgroups_now();
  });
}

void Daemon::sweep_cgroups_now() {
  if (leftovers_.names().empty()) {
    sweep_busy_rounds_ = 0;
    return;
  }
  // A local helper answers within kHelperCallTimeout; the daemon waits for it (it is one thread).
  auto helper = HelperCgroups::connect(options_.helper_socket);
  if (!helper.ok()) {
    std::cerr << "abox daemon: cannot delete the cgroups of ended instances now: "
              << helper.error().to_string() << " (again at the next ended instance or daemon start)\n";
    sweep_busy_rounds_ = 0;
    return;
  }
  SweepResult r =
      sweep_cgroups(*helper, leftovers_, [this](const std::string& n) { return shims_.count(n) != 0; });
  for (const auto& name : r.deleted) {
    std::cerr << "abox daemon: " << name << ": its cgroup is deleted\n";
    std::string f = folder(name);
    CgroupRecord was = read_cgroup_record(f);
    if (!was.may_exist()) continue;  // the folder is gone (rm), or a new boot wrote its own record
    auto sf = StateFolder::open(options_.instances_root, name);
    if (!sf.ok()) continue;
    (void)sf->write_file(kCgroupRecordFile,
                         cgroup_record_json({CgroupRecord::State::kRemoved, name, {}, {}}));
    append_event(f, name, "cgroup", {{"source", "daemon"}, {"state", "removed"}, {"cgroup", name}});
  }
  for (const auto& k : r.kept) std::cerr << "abox daemon: cannot delete a cgroup: " << k << '\n';
  if (!r.done() && ++sweep_busy_rounds_ < kSweepRetries) return sweep_cgroups_soon();
  if (!r.done())
    std::cerr << "abox daemon: cgroups still busy after " << kSweepRetries << " tries: kept listed\n";
  sweep_busy_rounds_ = 0;
}

base::Result<ShimRecord, std::string> Daemon::spawn_shim(const std::string& name, bool again) {
  PipeEnds report = make_pipe();
  base::UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  ChildSpec spec;
  spec.program = options_.abox;
  spec.argv = {options_.abox, "shim", "--root", options_.instances_root, name};
  if (again) spec.argv.insert(spec.argv.begin() + 2, "--again");
  spec.env = options_.shim_env;
  spec.fds = {{0, null_fd.get()}, {1, report.write.get()}, {2, STDERR_FILENO}};
  spec.kill_with_parent = false;
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) return base::Err{"could not start the shim: " + child.error()};
  report.write.reset();
  // "PID START_TICKS\n" from the detached shim; its first process exits at once.
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (line.find('\n') == std::string::npos && line.size() < 64) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{report.read.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[64];
    ssize_t n = ::read(report.read.get(), buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  ExitStatus first = child->wait();
  ShimRecord r;
  unsigned long long ticks = 0;
  int pid = 0;
  if (std::sscanf(line.c_str(), "%d %llu", &pid, &ticks) != 2 || pid <= 1)
    return base::Err{"the shim did not start (its first process " + first.describe() +
                     "; see the daemon's log)"};
  r.pid = pid;
  r.start_ticks = ticks;
  return r;
}

void Daemon::end_shim(const std::string& name, bool kill_now, std::function<void()> done) {
  auto it = shims_.find(name);
  if (it == shims_.end()) {
    done();
    return;
  }
  Shim& shim = *it->second;
  int fd = shim.pidfd->native_handle();
  pidfd_signal(fd, kill_now ? SIGKILL : SIGTERM);
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, kStopBound);
  timer->async_wait([this, name, fd, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    if (shims_.count(name) != 0) {
      std::cerr << "abox daemon: " << name << ": the shim did not end within the bound: SIGKILL\n";
      pidfd_signal(fd, SIGKILL);
    }
  });
  shim.on_exit.push_back([timer, done = std::move(done)] {
    timer->cancel();
    done();
  });
}

bool Daemon::exists(const std::string& name) const {
  struct stat st {};
  return ::lstat(folder(name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Daemon::describe(const std::string& name, bool full) const {
  std::string f = folder(name);
  auto record = read_json_object(f + "/instance.json");
  json::object rec = record.ok() ? std::move(record).value() : json::object{};
  bool managed = ::access((f + "/config.json").c_str(), F_OK) == 0;
  auto shim = shims_.find(name);
  bool live = shim != shims_.end();
  std::string state = record_state(rec);
  if (managed && !live && !terminal_state(state)) state = "failed";
  json::object o{{"name", name}, {"state", state}, {"managed", managed}};
  for (const char* k : {"image", "created", "outcome", "reason", "exit", "accel", "policy"}) {
    if (auto* v = rec.if_contains(k)) o[k] = *v;
  }
  if (managed) {
    o["cgroup"] = cgroup_record_object(read_cgroup_record(f));
  } else {
    o["cgroup"] = cgroup_record_object({CgroupRecord::State::kNone,
                                        {},
                                        {},
                                        "a foreground abox run: only the daemon's instances get cgroups"});
  }
  if (full) {
    o["folder"] = f;
    if (auto* v = rec.if_contains("processes")) o["processes"] = *v;
    if (managed) {
      auto config = read_detached_config(f);
      if (config.ok()) {
        json::array args;
        for (const auto& a : config->args) args.emplace_back(a);
        o["args"] = std::move(args);
        o["boots"] = config->boots;
        // What abox attach needs to know: a terminal (-t), and stdin (-i).
        std::vector<std::string_view> views(config->args.begin(), config->args.end());
        if (auto parsed = parse_options(views, run_options(), /*stop_at_positional=*/true); parsed.ok()) {
          o["tty"] = parsed->has("tty");
          o["interactive"] = parsed->has("interactive");
          // Its published ports (--publish), as abox-net was given them.
          json::array published;
          for (const auto& v : parsed->all("publish")) {
            if (auto spec = policy::parse_publish_spec(v); spec.ok())
              published.emplace_back(spec->to_string());
          }
          o["publish"] = std::move(published);
        }
      }
    }
    if (live) {
      o["shim"] = json::object{{"pid", shim->second->record.pid}, {"alive", true}};
    } else if (auto r = read_shim_record(f); r.ok()) {
      o["shim"] = json::object{{"pid", r->pid}, {"alive", false}};
    }
  }
  return json::serialize(o);
}

// ---- the socket ----

void Daemon::accept() {
  acceptor_->async_accept([this, alive = alive_](const boost::system::error_code& ec,
                                                 stream_protocol::socket s) {
    if (!*alive) return;
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      // Out of fds or memory: try again in a moment, not in a tight loop.
      std::cerr << "abox daemon: accept: " << ec.message() << '\n';
      auto retry = std::make_shared<boost::asio::steady_timer>(io_, 100ms);
      retry->async_wait([this, retry, alive](const boost::system::error_code& tec) {
        if (*alive && !tec) accept();
      });
      return;
    }
    {
      auto client = std::make_shared<Client>(std::move(s));
      ucred peer{};
      socklen_t len = sizeof peer;
      bool same_uid =
          ::getsockopt(client->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
          peer.uid == ::getuid();
      if (!same_uid) {
        ++refused_peers_;
        std::cerr << "abox daemon: refused a peer of uid " << peer.uid << " (pid " << peer.pid << ")\n";
        client->close_after = true;
        reply_error(client, 0, "refused: uid " + std::to_string(peer.uid) + " is not this daemon's operator");
      } else if (clients_ >= kMaxClients) {
        client->close_after = true;
        reply_error(client, 0, "refused: " + std::to_string(kMaxClients) + " clients are connected");
      } else {
        ++clients_;
        read_request(client);
      }
    }
    accept();
  });
}

void Daemon::read_request(std::shared_ptr<Client> client) {
  boost::asio::async_read_until(
      client->socket, boost::asio::dynamic_buffer(client->in, kMaxRequestBytes + 1), '\n',
      [this, client, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
        if (!*alive) return;
        if (ec) {
          if (ec == boost::asio::error::not_found) {
            ++bad_requests_;
            client->close_after = true;
            reply_error(client, 0, "refused: a request line longer than " + std::to_string(kMaxRequestBytes));
          }
          client->gone = client->gone || ec != boost::asio::error::not_found;
          client->end_execs();  // the client is gone: its execs' commands are killed
          --clients_;
          return;
        }
        std::string line = client->in.substr(0, n - 1);
        client->in.erase(0, n);
        ++requests_;
        auto r = parse_api_request(line);
        if (!r.ok()) {
          ++bad_requests_;
          reply_error(client, r.error().id, r.error().message);
        } else {
          handle(client, *r);
        }
        read_request(client);
      });
}

void Daemon::handle(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!r.name.empty()) adopt_if_alive(r.name);
  switch (r.op) {
    case ApiOp::kPing:
      return op_ping(c, r);
    case ApiOp::kRun:
      return op_run(c, r);
    case ApiOp::kList:
      return op_list(c, r);
    case ApiOp::kInspect:
      return op_inspect(c, r);
    case ApiOp::kStop:
      return op_stop(c, r);
    case ApiOp::kStart:
      return op_start(c, r);
    case ApiOp::kRemove:
      return op_remove(c, r);
    case ApiOp::kLogs:
    case ApiOp::kEvents:
      return op_stream(c, r);
    case ApiOp::kStats:
      return op_stats(c, r);
    case ApiOp::kInput:
      return op_input(c, r);
    case ApiOp::kExec:
      return op_exec(c, r);
    case ApiOp::kExecInput:
    case ApiOp::kExecResize:
    case ApiOp::kExecSignal:
      return op_exec_input(c, r);
    case ApiOp::kResize:
      return op_resize(c, r);
  }
}

// ---- the ops ----

void Daemon::op_ping(std::shared_ptr<Client> c, const ApiRequest& r) {
  std::size_t fds = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++fds;
    ::closedir(d);
  }
  json::object o = ok_reply(r.id);
  o["version"] = abox_version();
  o["api"] = kApiVersion;
  json::array ops;
  for (auto op : api_op_names()) ops.emplace_back(op);
  o["ops"] = std::move(ops);
  o["pid"] = ::getpid();
  o["rss_kib"] = process_rss_kib(::getpid());
  o["fds"] = fds > 2 ? fds - 3 : 0;  // ., .. and the one opendir holds
  o["instances"] = shims_.size();
  o["clients"] = clients_;
  o["requests"] = requests_;
  o["bad_requests"] = bad_requests_;
  o["refused_peers"] = refused_peers_;
  c->send(o);
}

void Daemon::op_run(std::shared_ptr<Client> c, const ApiRequest& r) {
  std::vector<std::string> args = r.args;
  auto parse = [](const std::vector<std::string>& a) {
    std::vector<std::string_view> views(a.begin(), a.end());
    return parse_options(views, run_options(), /*stop_at_positional=*/true);
  };
  auto parsed = parse(args);
  if (!parsed.ok()) return reply_error(c, r.id, parsed.error());
  if (parsed->help) return reply_error(c, r.id, "--help is not an instance");
  if (parsed->positionals.empty()) return reply_error(c, r.id, "no command: args end with -- CMD [ARGS...]");
  for (std::string_view flag : {"detach", "events", "json", "keep"}) {
    if (parsed->has(flag))
      return reply_error(c, r.id,
                         "--" + std::string(flag) + " is not for a detached instance (see docs/api.md)");
  }
  if (!parsed->has("name")) {
    args.insert(args.begin(), "--name=" + random_name());
    parsed = parse(args);
  }
  InstanceConfig probe;
  if (auto problem = run_config_from_args(*parsed, probe, /*local_terminal=*/false); !problem.empty())
    return reply_error(c, r.id, problem);
  std::string name = probe.name;
  if (shims_.count(name) != 0) return reply_error(c, r.id, "an instance named '" + name + "' runs");
  auto made = StateFolder::create(options_.instances_root, name);
  if (!made.ok()) return reply_error(c, r.id, made.error());
  DetachedConfig config{args, r.cwd, r.term, r.lang, 1};
  if (auto w = made->write_file("config.json", detached_config_json(config)); !w.ok()) {
    (void)made->remove();
    return reply_error(c, r.id, w.error());
  }
  auto shim = spawn_shim(name, false);
  base::UniqueFd pidfd = shim.ok() ? open_shim_pidfd(*shim) : base::UniqueFd();
  if (!pidfd) {
    (void)made->remove();
    return reply_error(c, r.id, shim.ok() ? "the shim ended at once (see the daemon's log)" : shim.error());
  }
  watch(name, *shim, std::move(pidfd));
  std::cerr << "abox daemon: " << name << " started (shim pid " << shim->pid << ")\n";
  json::object o = ok_reply(r.id);
  o["name"] = name;
  o["folder"] = made->path();
  c->send(o);
}

void Daemon::op_list(std::shared_ptr<Client> c, const ApiRequest& r) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(options_.instances_root.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      if (valid_instance_name(e->d_name) && e->d_type == DT_DIR) names.emplace_back(e->d_name);
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  json::array list;
  for (const auto& name : names) {
    adopt_if_alive(name);
    json::value v = json::parse(describe(name, false));
    auto& o = v.get_object();
    if (!r.all && terminal_state(o["state"].get_string())) continue;
    list.push_back(std::move(v));
  }
  json::object o = ok_reply(r.id);
  o["instances"] = std::move(list);
  c->send(o);
}

void Daemon::op_inspect(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  json::object o = ok_reply(r.id);
  o["instance"] = json::parse(describe(r.name, true));
  c->send(o);
}

void Daemon::op_stop(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  if (shims_.count(r.name) == 0) {
    json::value d = json::parse(describe(r.name, false));
    std::string state(d.get_object()["state"].get_string());
    if (!terminal_state(state))
      return reply_error(c, r.id,
                         "'" + r.name + "' is not the daemon's (a foreground abox run): stop it there");
    json::object o = ok_reply(r.id);
    o["state"] = state;
    o["already"] = true;
    return c->send(o);
  }
  end_shim(r.name, false, [this, c, id = r.id, name = r.name] {
    json::object o = ok_reply(id);
    o["state"] = json::parse(describe(name, false)).get_object()["state"];
    c->send(o);
  });
}

void Daemon::op_start(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  if (shims_.count(r.name) != 0) return reply_error(c, r.id, "'" + r.name + "' runs already");
  std::string f = folder(r.name);
  auto config = read_detached_config(f);
  if (!config.ok())
    return reply_error(c, r.id,
                       "'" + r.name + "' was not started by the daemon (no config.json): nothing to boot");
  auto made = StateFolder::open(options_.instances_root, r.name);
  if (!made.ok()) return reply_error(c, r.id, made.error());
  ++config->boots;
  // The last boot's record says stopped or failed: this boot starts from created.
  (void)made->write_file("instance.json",
                         json::serialize(json::object{{"name", r.name}, {"state", "created"}}) + "\n");
  if (auto w = made->write_file("config.json", detached_config_json(*config)); !w.ok())
    return reply_error(c, r.id, w.error());
  append_event(f, r.name, "instance", {{"source", "daemon"}, {"state", "starting"}, {"boot", config->boots}});
  auto shim = spawn_shim(r.name, true);
  base::UniqueFd pidfd = shim.ok() ? open_shim_pidfd(*shim) : base::UniqueFd();
  if (!pidfd)
    return reply_error(c, r.id, shim.ok() ? "the shim ended at once (see the daemon's log)" : shim.error());
  watch(r.name, *shim, std::move(pidfd));
  json::object o = ok_reply(r.id);
  o["name"] = r.name;
  o["boots"] = config->boots;
  c->send(o);
}

void Daemon::op_remove(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  auto remove = [this, c, id = r.id, name = r.name] {
    auto f = StateFolder::open(options_.instances_root, name);
    if (!f.ok()) return reply_error(c, id, f.error());
    if (auto gone = f->remove(); !gone.ok()) return reply_error(c, id, gone.error());
    json::object o = ok_reply(id);
    o["name"] = name;
    c->send(o);
  };
  if (shims_.count(r.name) != 0) {
    if (!r.force) return reply_error(c, r.id, "'" + r.name + "' runs: stop it first, or rm -f");
    return end_shim(r.name, true, remove);
  }
  std::string f = folder(r.name);
  if (::access((f + "/config.json").c_str(), F_OK) != 0) {
    // A foreground run's folder: only once none of its processes lives.
    auto rec = read_json_object(f + "/instance.json");
    if (rec.ok()) {
      if (auto* procs = rec->if_contains("processes"); procs != nullptr && procs->is_object()) {
        for (const auto& p : procs->get_object()) {
          if (live_process(p.value()) != 0)
            return reply_error(c, r.id, "'" + r.name + "' is a foreground abox run that still runs");
        }
      }
    }
  }
  remove();
}

void Daemon::op_stats(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  std::string f = folder(r.name);
  json::object o = ok_reply(r.id);
  o["name"] = r.name;
  json::value d = json::parse(describe(r.name, false));
  o["state"] = d.get_object()["state"];
  // Memory: the shim and each process of the instance that still runs.
  json::object memory;
  std::uint64_t total = 0;
  if (auto s = shims_.find(r.name); s != shims_.end()) {
    auto kib = process_rss_kib(s->second->record.pid);
    memory["shim"] = kib;
    total += kib;
  }
  if (auto rec = read_json_object(f + "/instance.json"); rec.ok()) {
    if (auto* procs = rec->if_contains("processes"); procs != nullptr && procs->is_object()) {
      for (const auto& p : procs->get_object()) {
        pid_t pid = live_process(p.value());
        if (pid == 0) continue;
        auto kib = process_rss_kib(pid);
        memory[p.key()] = kib;
        total += kib;
      }
    }
  }
  memory["total"] = total;
  o["rss_kib"] = std::move(memory);
  // abox-net's live counters, from its stats socket (a bounded, blocking read of a local socket).
  std::string stats_path = f + "/net.stats";
  base::UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  timeval tv{1, 0};
  std::string text;
  if (s && stats_path.size() < sizeof addr.sun_path) {
    std::memcpy(addr.sun_path, stats_path.c_str(), stats_path.size() + 1);
    ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    // One request line, then the reply until the server closes (netstack/program/stats_server.h).
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::send(s.get(), "stats\n", 6, MSG_NOSIGNAL) == 6) {
      ::shutdown(s.get(), SHUT_WR);
      char buf[8192];
      ssize_t n;
      while (text.size() < (1 << 20) && (n = ::read(s.get(), buf, sizeof buf)) > 0)
        text.append(buf, static_cast<std::size_t>(n));
    }
  }
  std::error_code ec;
  json::value net = text.empty() ? json::value() : json::parse(text, ec);
  o["network"] = ec ? json::value() : net;
  // The broker's requests and provider backoffs, as the broker reported them.
  std::ifstream events(f + "/events.jsonl");
  o["broker"] = broker_event_stats(events);
  c->send(o);
}

// ---- abox attach's input ----

void Daemon::op_input(std::shared_ptr<Client> c, const ApiRequest& r) {
  auto it = shims_.find(r.name);
  if (it == shims_.end()) return reply_error(c, r.id, "'" + r.name + "' is not running");
  Shim& shim = *it->second;
  if (shim.input_busy) return reply_error(c, r.id, "busy: wait for the answer to the last input");
  if (!shim.input) {
    std::string path = folder(r.name) + "/shim.sock";
    auto s = std::make_unique<stream_protocol::socket>(io_);
    boost::system::error_code ec;
    s->connect(stream_protocol::endpoint(path), ec);  // a local listener: answers at once or not at all
    if (ec)
      return reply_error(c, r.id,
                         "'" + r.name + "' takes no input (started without -i, or its stdin is closed)");
    shim.input = std::move(s);
  }
  auto data = std::make_shared<std::vector<std::uint8_t>>(r.data);
  shim.input_busy = true;
  boost::asio::async_write(*shim.input, boost::asio::buffer(*data),
                           [this, c, data, id = r.id, name = r.name, eof = r.eof, alive = alive_](
                               const boost::system::error_code& ec, std::size_t) {
                             if (!*alive) return;
                             auto it2 = shims_.find(name);
                             if (it2 == shims_.end()) return reply_error(c, id, "'" + name + "' ended");
                             Shim& s2 = *it2->second;
                             s2.input_busy = false;
                             if (ec) {
                               s2.input.reset();
                               return reply_error(c, id, "its stdin is closed: " + ec.message());
                             }
                             if (eof) s2.input.reset();  // the shim closes the command's stdin
                             json::object o = ok_reply(id);
                             o["bytes"] = data->size();
                             c->send(o);
                           });
}

// ---- abox exec, and the main command's window ----

void Daemon::op_exec(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  if (shims_.count(r.name) == 0) {
    // A foreground abox run has no shim but serves api.sock too, while it runs.
    json::value d = json::parse(describe(r.name, false));
    std::string state(d.get_object()["state"].get_string());
    if (d.get_object()["managed"].as_bool() || terminal_state(state))
      return reply_error(c, r.id, "'" + r.name + "' is not running (it is " + state + ")");
  }
  if (c->execs.count(r.id) != 0) return reply_error(c, r.id, "an exec with this id runs on this connection");
  ExecRequest e;
  e.argv = r.args;
  for (const auto& text : r.env) {
    auto entry = parse_env_assignment(text);
    if (!entry.ok()) return reply_error(c, r.id, entry.error());
    e.env.push_back(std::move(entry).value());
  }
  e.workdir = r.workdir;
  e.uid = r.uid;
  e.gid = r.gid;
  e.tty = r.tty;
  e.stdin_open = r.interactive;
  e.window = {r.rows, r.cols};
  std::weak_ptr<Client> weak = c;
  ExecRelay::Client sink{[weak](std::string line) {
                           if (auto cl = weak.lock()) cl->send_raw(std::move(line));
                         },
                         [weak]() -> std::size_t {
                           auto cl = weak.lock();
                           return cl ? cl->queued : 0;
                         },
                         [weak] {
                           auto cl = weak.lock();
                           return !cl || cl->gone;
                         }};
  auto relay = std::make_shared<ExecRelay>(io_, r.id, std::move(sink), [weak, id = r.id] {
    if (auto cl = weak.lock()) cl->execs.erase(id);
  });
  c->execs[r.id] = relay;
  relay->start(folder(r.name) + "/api.sock", std::string(kExecVerb) + exec_request_json(e) + "\n");
}

void Daemon::op_exec_input(std::shared_ptr<Client> c, const ApiRequest& r) {
  auto it = c->execs.find(r.exec);
  if (it == c->execs.end())
    return reply_error(
        c, r.id, "no exec " + std::to_string(r.exec) + " on this connection (it ended, or it is another's)");
  std::string line;
  if (r.op == ApiOp::kExecResize) {
    line = exec_resize_line(r.rows, r.cols);
  } else if (r.op == ApiOp::kExecSignal) {
    line = exec_signal_line(r.signal);
  } else {
    line = r.data.empty() && r.eof ? exec_eof_line() : exec_stdin_line(r.data);
    if (!r.data.empty() && r.eof) line += exec_eof_line();
  }
  const std::size_t bytes = r.data.size();
  it->second->input(std::move(line), [c, id = r.id, bytes](const std::string& error) {
    if (!error.empty()) return reply_error(c, id, error);
    json::object o = ok_reply(id);
    o["bytes"] = bytes;
    c->send(o);
  });
}

void Daemon::op_resize(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  if (shims_.count(r.name) == 0) return reply_error(c, r.id, "'" + r.name + "' is not running");
  struct Call {
    explicit Call(boost::asio::io_context& io) : socket(io), timer(io) {}
    stream_protocol::socket socket;
    boost::asio::steady_timer timer;
    std::string out, in;
    bool answered = false;
  };
  auto call = std::make_shared<Call>(io_);
  call->out = std::string(kResizeVerb) + std::to_string(r.rows) + " " + std::to_string(r.cols) + "\n";
  auto answer = [c, id = r.id, call](const std::string& error) {
    if (call->answered) return;
    call->answered = true;
    call->timer.cancel();
    boost::system::error_code ignored;
    call->socket.close(ignored);
    if (!error.empty()) return reply_error(c, id, error);
    c->send(ok_reply(id));
  };
  // A shim answers at once; one that does not is not waited on for long.
  call->timer.expires_after(5s);
  call->timer.async_wait([answer](const boost::system::error_code& ec) {
    if (!ec) answer("the instance's shim did not answer within 5 s");
  });
  call->socket.async_connect(
      stream_protocol::endpoint(folder(r.name) + "/api.sock"),
      [call, answer](const boost::system::error_code& ec) {
        if (ec) return answer("the instance's shim does not answer on api.sock: " + ec.message());
        boost::asio::async_write(
            call->socket, boost::asio::buffer(call->out),
            [call, answer](const boost::system::error_code& wec, std::size_t) {
              if (wec) return answer("the instance's shim: " + wec.message());
              boost::asio::async_read_until(
                  call->socket, boost::asio::dynamic_buffer(call->in, 4096), '\n',
                  [call, answer](const boost::system::error_code& rec, std::size_t n) {
                    if (rec) return answer("the instance's shim: " + rec.message());
                    std::string line = call->in.substr(0, n - 1);
                    if (line == "OK") return answer("");
                    answer(line.rfind("ERR ", 0) == 0 ? line.substr(4) : "the instance's shim: " + line);
                  });
            });
      });
}

// ---- logs and events ----

void Daemon::op_stream(std::shared_ptr<Client> c, const ApiRequest& r) {
  if (!exists(r.name)) return reply_error(c, r.id, "no instance named '" + r.name + "'");
  auto f = std::make_shared<Follow>(io_);
  f->client = c;
  f->id = r.id;
  f->name = r.name;
  f->events = r.op == ApiOp::kEvents;
  f->follow = r.follow;
  std::string base = folder(r.name);
  if (f->events) {
    f->live = base + "/events.jsonl";
  } else {
    f->live = base + "/output.log";
    if (::access((f->live + ".1").c_str(), F_OK) == 0) f->paths.push_back(f->live + ".1");
  }
  if (r.from_end && !f->events) {
    // abox attach: only what comes from now on.
    f->paths.clear();
    f->fd.reset(::open(f->live.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (f->fd) {
      struct stat st {};
      ::fstat(f->fd.get(), &st);
      f->ino = st.st_ino;
      ::lseek(f->fd.get(), 0, SEEK_END);
    }
  }
  f->paths.push_back(f->live);
  json::object o = ok_reply(r.id);
  o["stream"] = f->events ? "events" : "logs";
  if (!f->events) o["agent_reported"] = true;
  c->send(o);
  pump(f);
}

void Daemon::pump(std::shared_ptr<Follow> f) {
  auto later = [this, f](std::chrono::milliseconds wait) {
    f->timer.expires_after(wait);
    f->timer.async_wait([this, f, alive = alive_](const boost::system::error_code& ec) {
      if (*alive && !ec) pump(f);
    });
  };
  auto finish = [f] {
    json::object o{{"id", f->id}, {"done", true}};
    if (f->skipped != 0) o["skipped_lines"] = f->skipped;
    f->client->send(o);
  };
  std::size_t budget = 4 * kChunk;
  while (!f->client->gone) {
    if (f->client->queued > kMaxQueuedBytes || budget == 0) return later(20ms);
    if (!f->fd) {
      if (f->paths.empty()) return finish();
      f->fd.reset(::open(f->paths.front().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!f->fd) {
        // Not there (yet): the live file may come; an older part may not.
        if (f->paths.size() > 1) {
          f->paths.pop_front();
          continue;
        }
      } else {
        struct stat st {};
        ::fstat(f->fd.get(), &st);
        f->ino = st.st_ino;
      }
    }
    char buf[kChunk];
    ssize_t n = f->fd ? ::read(f->fd.get(), buf, sizeof buf) : 0;
    if (n > 0) {
      budget -= std::min(budget, static_cast<std::size_t>(n));
      if (!f->events) {
        f->client->send(
            json::object{{"id", f->id},
                         {"data", base64_encode(std::span(reinterpret_cast<const std::uint8_t*>(buf),
                                                          static_cast<std::size_t>(n)))}});
        continue;
      }
      f->partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (auto nl = f->partial.find('\n'); nl != std::string::npos; nl = f->partial.find('\n', start)) {
        std::string_view line(f->partial.data() + start, nl - start);
        start = nl + 1;
        std::error_code ec;
        json::value e = line.size() <= kMaxEventLine ? json::parse(line, ec) : json::value();
        if (line.size() > kMaxEventLine || ec || !e.is_object()) {
          ++f->skipped;
          continue;
        }
        f->client->send(json::object{{"id", f->id}, {"event", std::move(e)}});
      }
      f->partial.erase(0, start);
      if (f->partial.size() > kMaxEventLine) {
        ++f->skipped;
        f->partial.clear();
      }
      continue;
    }
    // At the end of this file.
    if (f->paths.size() > 1) {
      f->fd.reset();
      f->paths.pop_front();
      continue;
    }
    struct stat st {};
    if (f->fd && ::stat(f->live.c_str(), &st) == 0 && st.st_ino != f->ino) {
      f->fd.reset();  // rotated: the new file from its start
      continue;
    }
    if (!f->follow || f->last_pass) return finish();
    // Following: once the instance's shim is gone, one more pass reads what it wrote last.
    if (shims_.count(f->name) == 0) f->last_pass = true;
    return later(f->last_pass ? 0ms : kFollowTick);
  }
}

}  // namespace abox::engine
