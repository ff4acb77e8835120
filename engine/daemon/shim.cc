#include "engine/daemon/shim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>

#include "base/event_log.h"
#include "base/json.h"
#include "engine/cli/machine_setup.h"
#include "engine/cli/options.h"
#include "engine/cli/run_command.h"
#include "engine/daemon/instance_cgroup.h"
#include "engine/daemon/instance_files.h"
#include "engine/daemon/rotating_log.h"
#include "engine/daemon/stdin_relay.h"
#include "engine/instance/state_folder.h"
#include "engine/instance/supervisor.h"
#include "engine/process/child_process.h"
#include "engine/process/pipe_reader.h"
#include "engine/vmm/qemu_microvm.h"

namespace abox::engine {
namespace {

// The instance never got as far as a supervisor: say so where ls and events look.
void record_failure(const StateFolder& folder, const std::string& name, const std::string& reason) {
  std::string js;
  base::JsonWriter w(js);
  w.begin_object()
      .field("name", name)
      .field("state", "failed")
      .field("outcome", "could_not_start")
      .field("reason", reason)
      .end_object();
  js.push_back('\n');
  (void)folder.write_file("instance.json", js);
  append_event(folder.path(), name, "instance_failed",
               {{"source", "shim"}, {"outcome", "could_not_start"}, {"reason", reason}});
  std::cerr << "abox shim: " << name << ": " << reason << '\n';
}

}  // namespace

CgroupRecord enter_instance_cgroup(const StateFolder& folder, const std::string& name, unsigned memory_mib,
                                   unsigned cpus, bool may_use_tcg) {
  std::string unreachable;
  std::optional<HelperCgroups> helper;
  if (auto h = HelperCgroups::connect(helper::helper_socket_path(::getuid())); h.ok()) {
    helper.emplace(std::move(h).value());
  } else {
    unreachable = h.error().to_string();
  }
  auto write = [&folder](const CgroupRecord& r) {
    return folder.write_file(kCgroupRecordFile, cgroup_record_json(r)).ok();
  };
  CgroupRecord r = place_in_cgroup(helper ? &*helper : nullptr, unreachable, name,
                                   instance_cgroup_limits(memory_mib, cpus, may_use_tcg), ::getpid(), write);
  (void)write(r);
  if (r.state == CgroupRecord::State::kPlaced) {
    const auto& l = r.limits;
    append_event(folder.path(), name, "cgroup",
                 {{"source", "shim"},
                  {"state", "placed"},
                  {"cgroup", name},
                  {"memory_max", l.memory_max.value_or(0)},
                  {"cpu_max", std::to_string(l.cpu_max ? l.cpu_max->quota_us : 0) + "/" +
                                  std::to_string(l.cpu_max ? l.cpu_max->period_us : 0)},
                  {"pids_max", l.pids_max.value_or(0)}});
    std::cerr << "abox shim: " << name << ": in cgroup '" << name << "' of abox-helper\n";
  } else {
    const std::string reason = r.reason.empty() ? std::string("no cgroup") : r.reason;
    append_event(folder.path(), name, "cgroup", {{"source", "shim"}, {"state", "none"}, {"reason", reason}});
    std::cerr << "abox shim: " << name << ": no cgroup: " << reason << '\n';
  }
  return r;
}

namespace {

// Step 1 and 2 of the header: returns in the detached grandchild only.
bool detach(const StateFolder& folder) {
  pid_t first = ::fork();
  if (first < 0) return false;
  if (first > 0) ::_exit(0);
  if (::setsid() < 0) ::_exit(1);
  ShimRecord me{::getpid(), process_start_ticks(::getpid())};
  if (!folder.write_file("shim.json", shim_record_json(me)).ok()) ::_exit(1);
  std::string line = std::to_string(me.pid) + " " + std::to_string(me.start_ticks) + "\n";
  ssize_t ignored = ::write(STDOUT_FILENO, line.data(), line.size());
  (void)ignored;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int log_fd =
      ::open(folder.file("shim.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (null_fd < 0 || log_fd < 0) ::_exit(1);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  ::close(null_fd);
  ::close(log_fd);
  return true;
}

}  // namespace

int run_shim_command(std::span<const std::string_view> args) {
  bool again = false;
  std::string root, name;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--again") {
      again = true;
    } else if (args[i] == "--root" && i + 1 < args.size()) {
      root = std::string(args[++i]);
    } else if (name.empty() && !args[i].empty() && args[i][0] != '-') {
      name = std::string(args[i]);
    } else {
      std::cerr << "usage: abox shim [--again] --root ROOT NAME (started by the daemon)\n";
      return 2;
    }
  }
  if (root.empty() || root[0] != '/' || name.empty()) {
    std::cerr << "usage: abox shim [--again] --root ROOT NAME (started by the daemon)\n";
    return 2;
  }
  auto folder = StateFolder::open(root, name);
  if (!folder.ok()) {
    std::cerr << "abox shim: " << folder.error() << '\n';
    return 3;
  }
  if (!detach(*folder)) return 3;

  auto config = read_detached_config(folder->path());
  if (!config.ok()) {
    record_failure(*folder, name, config.error());
    return 3;
  }
  InstanceConfig c;
  std::vector<std::string_view> views(config->args.begin(), config->args.end());
  auto parsed = parse_options(views, run_options(), /*stop_at_positional=*/true);
  if (!parsed.ok()) {
    record_failure(*folder, name, parsed.error());
    return 3;
  }
  // Relative paths in the arguments start where the client was.
  if (::chdir(config->cwd.c_str()) != 0) {
    record_failure(*folder, name, "cannot enter " + config->cwd + ": " + std::strerror(errno));
    return 3;
  }
  std::string problem = run_config_from_args(*parsed, c, /*local_terminal=*/false);
  if (problem.empty() && c.name != name) problem = "config.json names another instance (" + c.name + ")";
  // Before any process of the instance exists (prepare_machine may already
  // start one, to probe KVM): they are all born inside.
  if (problem.empty()) {
    enter_instance_cgroup(*folder, name, c.memory_mib, c.cpus,
                          /*may_use_tcg=*/parsed->last("accel").value_or("auto") != "kvm");
  }
  c.instances_root = root;
  c.term = config->term;
  c.lang = config->lang;
  // -i: the command's stdin is shim.sock's (abox attach); -t: a pty in the
  // guest, its output in output.log, its window set by abox attach (resize).
  c.keep = true;
  c.folder_exists = true;
  if (problem.empty() && again) {
    c.copy_in.clear();
    c.policy_file = folder->policy();
    ::unlink((folder->broker_state() + "/nonce-secret").c_str());
  }
  if (problem.empty()) {
    problem = prepare_machine(c, parsed->last("image").value_or(""), parsed->last("accel").value_or("auto"),
                              "abox shim", std::cerr);
  }
  if (problem.empty() && again && !c.root_disk.empty()) {
    struct stat st {};
    if (::stat(folder->file("disk.ext4").c_str(), &st) == 0) c.existing_disk = folder->file("disk.ext4");
  }
  // Host paths made absolute from the client's folder; then the shim holds no mount busy.
  auto absolute = [&config](std::string& path) {
    if (!path.empty() && path[0] != '/') path = config->cwd + "/" + path;
  };
  absolute(c.policy_file);
  absolute(c.credentials_file);
  absolute(c.upstream_ca);
  for (auto& ci : c.copy_in) absolute(ci.host_path);
  if (problem.empty() && ::chdir("/") != 0) problem = std::string("chdir /: ") + std::strerror(errno);
  if (!problem.empty()) {
    record_failure(*folder, name, problem);
    return 3;
  }

  ::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io;
  RotatingLog output(folder->file("output.log"), kOutputLogBytes);
  auto out = make_pipe();
  auto err = make_pipe();
  int open_readers = 2;
  auto on_eof = [&] {
    if (--open_readers == 0) io.stop();
  };
  auto write_log = [&output](std::span<const std::uint8_t> b) { output.write(b); };
  PipeReader out_reader(io, std::move(out.read), write_log, on_eof);
  PipeReader err_reader(io, std::move(err.read), write_log, on_eof);
  base::UniqueFd dev_null = open_dev_null();
  // With -i: the command's stdin is a pipe the shim writes what shim.sock's
  // client sends into (abox attach, through the daemon); the client's EOF closes it.
  bool with_stdin = c.attach_stdin;
  PipeEnds in_pipe;
  std::unique_ptr<StdinRelay> relay;
  if (with_stdin) {
    in_pipe = make_pipe();
    relay = std::make_unique<StdinRelay>(io, folder->file("shim.sock"), std::move(in_pipe.write));
  }

  QemuMicrovm qemu(c.qemu);
  std::unique_ptr<InstanceSupervisor> supervisor;
  boost::asio::steady_timer drain_bound(io);
  supervisor = std::make_unique<InstanceSupervisor>(
      io, std::move(c), qemu, with_stdin ? in_pipe.read.get() : dev_null.get(), out.write.get(),
      err.write.get(), -1, [&](const InstanceOutcome&) {
        // The supervisor wrote instance.json; what the command printed last is
        // still in the pipes: close our ends and read them to the end (bounded).
        supervisor.reset();
        relay.reset();
        out.write.reset();
        err.write.reset();
        drain_bound.expires_after(std::chrono::seconds(5));
        drain_bound.async_wait([&io](const boost::system::error_code& ec) {
          if (!ec) io.stop();
        });
      });
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  int signals_seen = 0;
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int signo) {
      if (ec || !supervisor) return;
      if (++signals_seen == 1)
        supervisor->stop(signo);
      else
        supervisor->kill_now();
      wait_signal();
    });
  };
  wait_signal();
  ::signal(SIGHUP, SIG_IGN);
  supervisor->start();
  io.run();
  return 0;
}

}  // namespace abox::engine
