#include "engine/instance/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/json.h"
#include "base/whole_file.h"
#include "broker/credentials.h"
#include "broker/service.h"
#include "engine/cli/credentials_command.h"
#include "engine/instance/exec_client.h"
#include "engine/instance/exec_wire.h"
#include "engine/instance/guest_environment.h"
#include "policy/policy_file.h"

namespace abox::engine {
namespace {

using namespace std::chrono_literals;

constexpr auto kNetworkReadyTimeout = 20s;
constexpr auto kBrokerReadyTimeout = 20s;
constexpr auto kChildStopGrace = 3s;
constexpr auto kEchoGrace = 500ms;
constexpr std::uint32_t kOutputCredit = 256 * 1024;
constexpr std::size_t kMaxChildLine = 64 * 1024;
constexpr std::uint64_t kChildLogBytes = 1 << 20;

// Startup: a FIFO or a folder named as the policy is refused, never waited on.
std::string read_policy_file(const std::string& path) {
  auto text = base::read_whole_file(path, policy::kMaxPolicyFileBytes);
  if (!text.ok()) throw std::runtime_error(path + ": " + text.error().message);
  return std::move(text).value();
}

std::string last_lines(const std::string& text, std::size_t max_chars = 600) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  if (t.size() > max_chars) t = "..." + t.substr(t.size() - max_chars);
  return t;
}

}  // namespace

std::string_view instance_state_name(InstanceState s) {
  switch (s) {
    case InstanceState::kCreated:
      return "created";
    case InstanceState::kStartingNetwork:
      return "starting_network";
    case InstanceState::kStartingBroker:
      return "starting_broker";
    case InstanceState::kStartingVmm:
      return "starting_vmm";
    case InstanceState::kBooting:
      return "booting";
    case InstanceState::kSelftest:
      return "selftest";
    case InstanceState::kRunning:
      return "running";
    case InstanceState::kStopping:
      return "stopping";
    case InstanceState::kStopped:
      return "stopped";
    case InstanceState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view outcome_kind_name(InstanceOutcome::Kind k) {
  using K = InstanceOutcome::Kind;
  switch (k) {
    case K::kExited:
      return "exited";
    case K::kCouldNotStart:
      return "could_not_start";
    case K::kCommandNotStarted:
      return "command_not_started";
    case K::kSelftestFailed:
      return "selftest_failed";
    case K::kTimedOut:
      return "timed_out";
    case K::kCrashed:
      return "crashed";
    case K::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

InstanceSupervisor::InstanceSupervisor(boost::asio::io_context& io, InstanceConfig config, const Vmm& vmm,
                                       int stdin_fd, int stdout_fd, int stderr_fd, int events_extra_fd,
                                       DoneHandler on_done)
    : io_(io),
      config_(std::move(config)),
      policy_source_(config_.policy_file),
      vmm_(vmm),
      on_done_(std::move(on_done)),
      stdin_fd_(stdin_fd),
      stdout_fd_(stdout_fd),
      stderr_fd_(stderr_fd),
      events_extra_fd_(events_extra_fd),
      step_timer_(io),
      run_timer_(io),
      cause_timer_(io),
      idle_timer_(io),
      stop_timer_(io) {}

namespace {

// The broker's keys in a memfd, sealed (no write, grow or shrink) and at
// offset 0: the broker reads it once as fd 3 and closes it; this process
// closes its end once the broker is started. Throws on failure (startup).
base::UniqueFd sealed_keys_memfd(std::string_view text) {
  base::UniqueFd fd(::memfd_create("abox-broker-keys", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("writing the broker's keys: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0 ||
      ::lseek(fd.get(), 0, SEEK_SET) != 0)
    throw std::runtime_error(std::string("sealing the broker's keys: ") + std::strerror(errno));
  return fd;
}

}  // namespace

InstanceSupervisor::~InstanceSupervisor() {
  *alive_ = false;
  for (auto& c : exec_clients_) c->abandon();
  broker::wipe(broker_keys_);
  // Children still running are killed and reaped by ChildProcess's destructor.
}

std::int64_t InstanceSupervisor::elapsed_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_at_)
      .count();
}

void InstanceSupervisor::emit_line(std::string_view line) {
  auto put = [&](int fd) {
    if (fd < 0) return;
    std::string l(line);
    l.push_back('\n');
    // One write per line: with O_APPEND, lines from every writer stay whole.
    ssize_t ignored = ::write(fd, l.data(), l.size());
    (void)ignored;
  };
  put(events_file_.get());
  put(events_extra_fd_);
}

void InstanceSupervisor::transition(InstanceState s, std::string_view reason) {
  state_ = s;
  if (events_) {
    if (reason.empty()) {
      events_->emit("instance", {{"source", "supervisor"}, {"state", instance_state_name(s)}});
    } else {
      events_->emit("instance",
                    {{"source", "supervisor"}, {"state", instance_state_name(s)}, {"reason", reason}});
    }
  }
  write_record();
}

void InstanceSupervisor::start() {
  started_at_ = std::chrono::steady_clock::now();
  created_wall_ = std::chrono::system_clock::now();
  outcome_.accel = std::string(accel_name(config_.accel));
  try {
    prepare();
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
    return;
  }
  start_network();
  if (!config_.root_disk.empty() && config_.existing_disk.empty()) start_disk();
}

void InstanceSupervisor::prepare() {
  auto folder = config_.folder_exists ? StateFolder::open(config_.instances_root, config_.name)
                                      : StateFolder::create(config_.instances_root, config_.name);
  if (!folder.ok()) throw std::runtime_error(folder.error());
  folder_ = std::move(folder).value();
  folder_path_ = folder_->path();
  outcome_.state_folder = folder_path_;

  events_file_.reset(
      ::open(folder_->events().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!events_file_) throw std::runtime_error(folder_->events() + ": " + std::strerror(errno));
  events_ = std::make_unique<base::EventLog>(config_.name, [this](std::string_view line) {
    // EventLog hands over the line with its newline.
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    emit_line(line);
    return true;
  });
  transition(InstanceState::kCreated);

  // The policy: a copy of the operator's file, validated, is what every part reads.
  std::string policy_text = read_policy_file(config_.policy_file);
  if (auto w = folder_->write_file("policy.toml", policy_text); !w.ok()) throw std::runtime_error(w.error());
  auto loaded = policy::load_policy(folder_->policy());
  if (!loaded.ok()) {
    std::string msg = loaded.error().to_string();
    // The copy's name means nothing to the operator: name their file.
    for (auto pos = msg.find(folder_->policy()); pos != std::string::npos; pos = msg.find(folder_->policy()))
      msg.replace(pos, folder_->policy().size(), config_.policy_file);
    throw std::runtime_error("the policy is invalid:\n" + last_lines(msg, 4000));
  }
  const policy::Policy& policy = *loaded;
  has_bindings_ = !policy.brokers().empty();

  GuestEnvironmentInput env_in;
  env_in.term = config_.term;
  env_in.lang = config_.lang;
  env_in.user = config_.user_env;
  std::vector<std::string_view> keys;
  std::optional<broker::Credentials> credentials;
  if (config_.copy_out_only) {
    // Nothing of the operator's runs: no broker, no keys, no nonces, no self-test.
    has_bindings_ = false;
  } else if (has_bindings_) {
    // The keys of this instance's bindings, and only those, from the store
    // (or --credentials FILE): what start_broker() hands the broker.
    auto text = instance_key_text(policy);
    if (!text.ok()) throw std::runtime_error(text.error());
    broker::wipe(broker_keys_);
    broker_keys_ = std::move(text).value();
    auto creds = broker::Credentials::parse_instance_text(broker_keys_, policy);
    if (!creds.ok()) throw std::runtime_error(creds.error());
    credentials.emplace(std::move(creds).value());
    keys = credentials->all_keys();
    auto ca = broker::instance_ca_pem(folder_->broker_state(), config_.name);
    if (!ca.ok()) throw std::runtime_error(ca.error());
    setup_.ca_pem = *ca;
    auto nonces = broker::binding_nonces(policy, folder_->broker_state());
    if (!nonces.ok()) throw std::runtime_error(nonces.error());
    for (const auto& n : *nonces) {
      env_in.nonces.push_back({n.env, n.nonce});
      nonce_variables_.push_back(n.env);
    }
    env_in.has_ca = true;
  }
  auto env = build_guest_environment(env_in);
  if (!env.ok()) throw std::runtime_error(env.error());
  if (auto clean = check_no_key(*env, config_.argv, keys); !clean.ok())
    throw std::runtime_error(clean.error());

  if (config_.copy_out_only) {
    // No command runs, so there is nothing to prove before it.
  } else if (config_.selftest) {
    plan_ = plan_selftest(policy, config_.selftest_targets);
    outcome_.selftest_skipped = plan_.skipped;
  } else {
    events_->emit("selftest_skipped", {{"source", "supervisor"},
                                       {"reason", "--no-selftest: the guest's refusals were not proven"}});
  }

  if (::getrandom(setup_.key.data(), setup_.key.size(), 0) != static_cast<ssize_t>(setup_.key.size()))
    throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
  setup_.env = std::move(env).value();
  setup_.workdir = config_.workdir;
  setup_.uid = 1000;
  setup_.gid = 1000;
  setup_.argv = config_.argv;
  setup_.probes = plan_.probes;
  setup_.output_credit = kOutputCredit;
  setup_.stdin_open = config_.attach_stdin;
  setup_.tty = config_.tty;
  setup_.window = config_.window;
  std::vector<std::uint8_t> encoded;
  guest::encode(setup_, encoded);
  if (encoded.size() > guest::kMaxPayload) {
    throw std::runtime_error("the command, its environment and the CA take " +
                             std::to_string(encoded.size()) + " bytes; the control channel carries at most " +
                             std::to_string(guest::kMaxPayload));
  }

  upper_disk_ = config_.existing_disk.empty() ? folder_->file("disk.ext4") : config_.existing_disk;
  if (!config_.root_disk.empty() && config_.existing_disk.empty()) {
    // The instance's writable layer: a sparse file of --disk bytes, which is
    // all the guest can ever write (a full disk is the agent's error, not the
    // host's). Formatted by mkfs.ext4 in start_disk(), beside abox-net's start.
    base::UniqueFd disk(::open(folder_->file("disk.ext4").c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!disk || ::ftruncate(disk.get(), static_cast<off_t>(config_.disk_bytes)) != 0)
      throw std::runtime_error(folder_->file("disk.ext4") + ": " + std::strerror(errno));
    disk_ready_ = false;
  }
  for (const auto& c : config_.copy_in) {
    if (::access(c.host_path.c_str(), R_OK) != 0)
      throw std::runtime_error("--copy-in " + c.host_path + ": " + std::strerror(errno));
  }

  dev_null_ = open_dev_null();
  if (config_.copy_out_only) copy_output_ = std::make_unique<HostOutput>(io_, config_.copy_out_only->fd);
  out_ = std::make_unique<HostOutput>(io_, stdout_fd_);
  err_ = std::make_unique<HostOutput>(io_, stderr_fd_);
  // Whoever reads our stdout went away: the command gets what a writer in a
  // pipeline gets, SIGPIPE (to its process group, in the guest).
  out_->on_broken([this] {
    if (session_ && session_->open() && command_started()) {
      events_->emit("stdout_closed", {{"source", "supervisor"}, {"signal", "SIGPIPE"}});
      session_->send_signal(guest::kMainSession, SIGPIPE);
    }
  });
}

void InstanceSupervisor::spawn_child(Child& c, const ChildSpec& spec, base::UniqueFd out_read,
                                     base::UniqueFd err_read, const std::string& log_path,
                                     std::function<void(std::string_view)> on_line) {
  auto spawned = ChildProcess::spawn(spec);
  if (!spawned.ok()) throw std::runtime_error("could not start " + c.label + ": " + spawned.error());
  c.process.emplace(std::move(spawned).value());
  if (on_line) {
    c.lines = std::make_unique<LineSplitter>(kMaxChildLine, std::move(on_line));
    c.out = std::make_unique<PipeReader>(
        io_, std::move(out_read), [&c](std::span<const std::uint8_t> b) { c.lines->feed(b); },
        [&c] { c.lines->finish(); });
  }
  c.err_log = std::make_unique<TailLog>(log_path, kChildLogBytes);
  c.err = std::make_unique<PipeReader>(
      io_, std::move(err_read), [&c](std::span<const std::uint8_t> b) { c.err_log->write(b); }, nullptr);
  c.watch =
      std::make_unique<ChildWatch>(io_, *c.process, [this, &c](const ExitStatus& s) { on_child_exit(c, s); });
  events_->emit("process", {{"source", "supervisor"},
                            {"process", c.label},
                            {"event", "started"},
                            {"pid", static_cast<std::int64_t>(c.process->pid())}});
  write_record();
}

void InstanceSupervisor::start_network() {
  transition(InstanceState::kStartingNetwork);
  ChildSpec spec;
  spec.program = config_.abox_net;
  spec.argv = {config_.abox_net,      "run",        "--policy",   folder_->policy(), "--stream",
               folder_->net_socket(), "--instance", config_.name, "--events",        "-"};
  if (config_.ipv6) {
    spec.argv.push_back("--ipv6");
    spec.argv.push_back("on");
  }
  if (has_bindings_) {
    spec.argv.push_back("--broker");
    spec.argv.push_back(folder_->broker_socket());
  }
  // Published ports: abox-net listens on the host for them (abox run --publish).
  for (const std::string& published : config_.publish) {
    spec.argv.push_back("--publish");
    spec.argv.push_back(published);
  }
  // Always: the flows' counters (the idle timeout, `abox stats`), and
  // `abox policy apply`'s reload of a running instance.
  spec.argv.push_back("--stats-socket");
  spec.argv.push_back(folder_->net_stats_socket());
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  auto out = make_pipe();
  auto err = make_pipe();
  spec.fds = {{0, dev_null_.get()}, {1, out.write.get()}, {2, err.write.get()}};
  spec.new_session = true;
  try {
    spawn_child(net_, spec, std::move(out.read), std::move(err.read), folder_->file("abox-net.log"),
                [this](std::string_view line) {
                  if (line.rfind("ready ", 0) == 0 && state_ == InstanceState::kStartingNetwork) {
                    outcome_.ms_network_ready = elapsed_ms();
                    step_timer_.cancel();
                    if (has_bindings_) {
                      start_broker();
                    } else {
                      network_ready_ = true;
                      maybe_start_vmm();
                    }
                  } else if (!line.empty() && line[0] == '{') {
                    emit_line(line);
                  }
                });
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
    return;
  }
  step_timer_.expires_after(kNetworkReadyTimeout);
  step_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec || state_ != InstanceState::kStartingNetwork) return;
    fail(InstanceOutcome::Kind::kCouldNotStart, "abox-net did not report ready within 20 s: " +
                                                    last_lines(net_.err_log ? net_.err_log->tail() : ""));
  });
}

void InstanceSupervisor::start_broker() {
  transition(InstanceState::kStartingBroker);
  ChildSpec spec;
  spec.program = config_.abox;
  spec.argv = {config_.abox,       "broker",
               "--policy",         folder_->policy(),
               "--credentials-fd", "3",
               "--state",          folder_->broker_state(),
               "--listen",         "unix:" + folder_->broker_socket(),
               "--instance",       config_.name,
               "--control-socket", folder_->broker_control_socket(),
               "--events",         "-"};
  if (!config_.upstream_ca.empty()) {
    spec.argv.push_back("--upstream-ca");
    spec.argv.push_back(config_.upstream_ca);
  }
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  auto out = make_pipe();
  auto err = make_pipe();
  base::UniqueFd keys;
  try {
    keys = sealed_keys_memfd(broker_keys_);
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
    return;
  }
  broker::wipe(broker_keys_);
  spec.fds = {{0, dev_null_.get()}, {1, out.write.get()}, {2, err.write.get()}, {3, keys.get()}};
  spec.new_session = true;
  try {
    spawn_child(broker_, spec, std::move(out.read), std::move(err.read), folder_->file("broker.log"),
                [this](std::string_view line) {
                  if (line.rfind("listening on ", 0) == 0 && state_ == InstanceState::kStartingBroker) {
                    step_timer_.cancel();
                    network_ready_ = true;
                    maybe_start_vmm();
                  } else if (!line.empty() && line[0] == '{') {
                    emit_line(line);
                  }
                });
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
    return;
  }
  step_timer_.expires_after(kBrokerReadyTimeout);
  step_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec || state_ != InstanceState::kStartingBroker) return;
    fail(InstanceOutcome::Kind::kCouldNotStart,
         "the broker did not start listening within 20 s: " +
             last_lines(broker_.err_log ? broker_.err_log->tail() : ""));
  });
}

void InstanceSupervisor::start_vmm() {
  transition(InstanceState::kStartingVmm);
  try {
    // Listen before QEMU starts: it connects at once, and nothing it says is lost.
    using boost::asio::local::stream_protocol;
    ::unlink(folder_->control_socket().c_str());
    acceptor_ = std::make_unique<stream_protocol::acceptor>(
        io_, stream_protocol::endpoint(folder_->control_socket()));
    ::chmod(folder_->control_socket().c_str(), 0600);

    VmSpec vm;
    vm.name = config_.name;
    vm.kernel = config_.kernel;
    vm.initramfs = config_.initramfs;
    vm.cpus = config_.cpus;
    vm.memory_mib = config_.memory_mib;
    vm.accel = config_.accel;
    if (!config_.root_disk.empty()) {
      vm.disks.push_back({config_.root_disk, /*read_only=*/true});
      vm.disks.push_back({upper_disk_, /*read_only=*/false});
    }
    vm.net_socket = folder_->net_socket();
    vm.control_socket = folder_->control_socket();
    auto console = make_pipe();
    auto err = make_pipe();
    vm.stdin_fd = dev_null_.get();
    vm.console_fd = console.write.get();
    vm.stderr_fd = err.write.get();
    auto spec = vmm_.command(vm);
    if (!spec.ok()) throw std::runtime_error(std::string(vmm_.name()) + ": " + spec.error());

    console_log_ = std::make_unique<TailLog>(folder_->console_log(), kConsoleLogBytes);
    console_reader_ = std::make_unique<PipeReader>(
        io_, std::move(console.read), [this](std::span<const std::uint8_t> b) { console_log_->write(b); },
        nullptr);
    spawn_child(vmm_child_, *spec, base::UniqueFd(), std::move(err.read), folder_->file("vmm.log"), nullptr);
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
    return;
  }
  outcome_.ms_vmm_started = elapsed_ms();
  events_->emit("vmm", {{"source", "supervisor"},
                        {"vmm", vmm_.name()},
                        {"accel", accel_name(config_.accel)},
                        {"cpus", config_.cpus},
                        {"memory_mib", config_.memory_mib},
                        {"image", config_.image_name}});
  transition(InstanceState::kBooting);
  accept_control();
  step_timer_.expires_after(config_.boot_timeout);
  step_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec || state_ != InstanceState::kBooting) return;
    fail(InstanceOutcome::Kind::kCouldNotStart, "the guest did not say hello within " +
                                                    std::to_string(config_.boot_timeout.count() / 1000) +
                                                    " s of the VMM's start; its console ends: " +
                                                    last_lines(console_log_ ? console_log_->tail() : ""));
  });
}

void InstanceSupervisor::accept_control() {
  acceptor_->async_accept([this, alive = alive_](const boost::system::error_code& ec,
                                                 boost::asio::local::stream_protocol::socket socket) {
    if (!*alive || ec || stopping_) return;
    // Exactly one connection: the VMM's. The socket file goes at once.
    boost::system::error_code ignored;
    acceptor_->close(ignored);
    ::unlink(folder_->control_socket().c_str());
    ControlSession::Listener& listener = *this;
    session_ = std::make_unique<ControlSession>(std::move(socket), listener);
    execs_ = std::make_unique<ExecMultiplexer>(*session_);
    session_->start();
    listen_api();
  });
}

void InstanceSupervisor::on_hello(const guest::Hello& hello) {
  outcome_.ms_hello = elapsed_ms();
  events_->emit("guest_hello", {{"source", "box-guest"},
                                {"version", static_cast<std::uint64_t>(hello.version)},
                                {"agent", hello.agent},
                                {"uptime_ms", hello.uptime_ms},
                                {"network_up", hello.network_up},
                                {"network", hello.network}});
  if (hello.version != guest::kProtocolVersion) {
    // Said at once and the guest powered off: a peer of another version never hangs.
    std::string fix = hello.version < guest::kProtocolVersion
                          ? "its box-guest is older than this abox: rebuild the image (abox image build " +
                                config_.image_name + ")"
                          : "its box-guest is newer than this abox: use the abox the image was built with, "
                            "or rebuild the image with this one (abox image build " +
                                config_.image_name + ")";
    fail(InstanceOutcome::Kind::kCouldNotStart, "box-guest speaks control protocol " +
                                                    std::to_string(hello.version) + ", this abox speaks " +
                                                    std::to_string(guest::kProtocolVersion) + ": " + fix);
    return;
  }
  if (!hello.network_up) {
    fail(InstanceOutcome::Kind::kCouldNotStart, "the guest's network did not come up: " + hello.network);
    return;
  }
  session_->send_setup(setup_);
  // The key now lives in box-guest and in the session's reader and writer only.
  setup_.key.fill(0);
  if (plan_.probes.empty()) {
    next_copy_in();
  } else {
    transition(InstanceState::kSelftest);
  }
}

void InstanceSupervisor::on_selftest(const guest::SelftestReport& report) {
  outcome_.selftest = report.results;
  for (const auto& r : report.results) {
    events_->emit("selftest", {{"source", "box-guest"},
                               {"probe", guest::probe_kind_name(r.kind)},
                               {"target", r.target},
                               {"outcome", guest::probe_outcome_name(r.outcome)},
                               {"detail", r.detail}});
  }
  auto verdict = judge_selftest(plan_, report);
  outcome_.selftest_failures = verdict.failures;
  if (!verdict.passed) {
    std::string reason = "the self-test failed: ";
    for (std::size_t i = 0; i < verdict.failures.size(); ++i) reason += (i ? "; " : "") + verdict.failures[i];
    fail(InstanceOutcome::Kind::kSelftestFailed, reason);
    return;
  }
  next_copy_in();
}

void InstanceSupervisor::send_go() {
  if (stopping_) return;
  session_->send_go();
  transition(InstanceState::kRunning, "go");
}

void InstanceSupervisor::on_started(const guest::Started& started) {
  if (started.session != guest::kMainSession) {
    events_->emit("exec_started", {{"source", "box-guest"},
                                   {"session", static_cast<std::uint64_t>(started.session)},
                                   {"pid", static_cast<std::uint64_t>(started.pid)}});
    if (execs_) execs_->on_started(started);
    return;
  }
  step_timer_.cancel();
  outcome_.ms_command_started = elapsed_ms();
  events_->emit("command_started",
                {{"source", "box-guest"}, {"pid", static_cast<std::uint64_t>(started.pid)}});
  if (config_.timeout) {
    run_timer_.expires_after(*config_.timeout);
    run_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (!*alive || ec || stopping_) return;
      fail(InstanceOutcome::Kind::kTimedOut,
           "the command ran past --timeout (" + std::to_string(config_.timeout->count()) + " ms)");
    });
  }
  if (config_.idle_timeout) {
    last_activity_ = std::chrono::steady_clock::now();
    poll_idle();
  }
  if (config_.attach_stdin) {
    in_ = std::make_unique<HostInput>(
        io_, stdin_fd_,
        [this](std::span<const std::uint8_t> b) {
          if (session_ && session_->open()) session_->send_stdin(guest::kMainSession, b);
          pump_stdin();
        },
        [this] {
          if (session_ && session_->open()) session_->send_stdin_eof(guest::kMainSession);
        });
    pump_stdin();
  }
}

void InstanceSupervisor::pump_stdin() {
  if (!in_ || !session_ || !session_->open() || stopping_) return;
  std::uint64_t credit =
      std::min<std::uint64_t>(session_->stdin_credit(guest::kMainSession), guest::kMaxStreamBytes);
  if (credit > 0) in_->read(static_cast<std::size_t>(credit));
}

void InstanceSupervisor::on_stdin_credit(std::uint32_t session, std::uint32_t) {
  if (session != guest::kMainSession) {
    if (execs_) execs_->on_stdin_credit(session);
    return;
  }
  pump_stdin();
}

void InstanceSupervisor::on_start_failed(const guest::StartFailed& failed) {
  if (failed.session != guest::kMainSession) {
    events_->emit("exec_start_failed", {{"source", "box-guest"},
                                        {"session", static_cast<std::uint64_t>(failed.session)},
                                        {"reason", guest::start_failure_name(failed.reason)},
                                        {"errno", static_cast<std::int64_t>(failed.error)},
                                        {"detail", failed.detail}});
    if (execs_) execs_->on_start_failed(failed);
    return;
  }
  outcome_.start_failure = failed;
  events_->emit("command_start_failed", {{"source", "box-guest"},
                                         {"reason", static_cast<std::uint64_t>(failed.reason)},
                                         {"errno", static_cast<std::int64_t>(failed.error)},
                                         {"detail", failed.detail}});
  fail(InstanceOutcome::Kind::kCommandNotStarted,
       "the command could not start in the guest: " + failed.detail);
}

void InstanceSupervisor::on_output(std::uint32_t session, bool is_stderr,
                                   std::span<const std::uint8_t> bytes) {
  if (session != guest::kMainSession) {
    exec_output_bytes_ += bytes.size();
    if (execs_) execs_->on_output(session, is_stderr, bytes);
    return;
  }
  if (outcome_.ms_first_output < 0) outcome_.ms_first_output = elapsed_ms();
  (is_stderr ? outcome_.stderr_bytes : outcome_.stdout_bytes) += bytes.size();
  auto n = static_cast<std::uint32_t>(bytes.size());
  (is_stderr ? err_ : out_)->write(bytes, [this, n, alive = alive_] {
    if (!*alive) return;
    if (session_ && session_->open()) session_->grant_output(guest::kMainSession, n);
    check_done();
  });
}

void InstanceSupervisor::on_exited(const guest::Exited& exited) {
  if (exited.session != guest::kMainSession) {
    events_->emit("exec_exited", {{"source", "box-guest"},
                                  {"session", static_cast<std::uint64_t>(exited.session)},
                                  {"signalled", exited.signalled},
                                  {"value", static_cast<std::uint64_t>(exited.value)}});
    if (execs_) execs_->on_exited(exited);
    return;
  }
  events_->emit("command_exited", {{"source", "box-guest"},
                                   {"signalled", exited.signalled},
                                   {"value", static_cast<std::uint64_t>(exited.value)}});
  if (!outcome_set_) {
    outcome_set_ = true;
    outcome_.kind = InstanceOutcome::Kind::kExited;
    outcome_.exit = exited;
    outcome_.ms_ended = elapsed_ms();
  }
  begin_stop();
}

void InstanceSupervisor::on_guest_log(std::string_view text) {
  events_->emit("guest_log", {{"source", "box-guest"}, {"text", text}});
}

void InstanceSupervisor::on_unknown_session(std::string_view message, std::uint32_t session) {
  // Counted always; logged for the first 16, then once in 1024, so that a
  // guest cannot fill the events file with them.
  ++outcome_.unknown_session_frames;
  const std::uint64_t n = outcome_.unknown_session_frames;
  if (n > 16 && n % 1024 != 0) return;
  events_->emit("control_unknown_session", {{"source", "supervisor"},
                                            {"message", message},
                                            {"session", static_cast<std::uint64_t>(session)},
                                            {"count", n},
                                            {"dropped", true}});
}

void InstanceSupervisor::on_forged_frame(std::string_view reason) {
  ++outcome_.forged_frames;
  events_->emit("control_forged_frame", {{"source", "supervisor"}, {"reason", reason}});
}

void InstanceSupervisor::on_closed(std::string_view reason) {
  end_execs(stopping_ ? "the instance stopped before the command ended"
                      : "the instance's control channel closed before the command ended");
  if (stopping_ && reason.empty()) return;  // the guest powering off as asked
  auto kind = command_started() ? InstanceOutcome::Kind::kCrashed : InstanceOutcome::Kind::kCouldNotStart;
  if (!reason.empty()) {
    fail(kind, std::string(reason));  // the guest broke the protocol
    return;
  }
  fail_unless_vmm_died(kind, "the guest closed the control channel before the command ended");
}

void InstanceSupervisor::fail_unless_vmm_died(InstanceOutcome::Kind kind, std::string reason) {
  // A VMM that dies closes the control channel and abox-net's socket a moment
  // before its own pidfd says so: give the VMM's death the first word, so the
  // reason names it and not one of its echoes.
  cause_timer_.expires_after(kEchoGrace);
  cause_timer_.async_wait(
      [this, kind, reason = std::move(reason), alive = alive_](const boost::system::error_code& ec) {
        if (!*alive || ec) return;
        fail(kind, reason);
      });
}

void InstanceSupervisor::on_child_exit(Child& c, const ExitStatus& status) {
  events_->emit(
      "process",
      {{"source", "supervisor"}, {"process", c.label}, {"event", "exited"}, {"status", status.describe()}});
  c.watch.reset();
  write_record();
  if (&c == &disk_tool_) {
    if (stopping_) return check_done();
    if (status.signalled || status.value != 0) {
      fail(InstanceOutcome::Kind::kCouldNotStart,
           "formatting the instance's disk failed: " + status.describe() + ": " +
               last_lines(c.err_log ? c.err_log->tail() : ""));
      return;
    }
    disk_ready_ = true;
    maybe_start_vmm();
    return;
  }
  if (&c == &copy_tool_) {
    copy_tool_status_ = status;
    if (stopping_) return check_done();
    finish_copy_in_stream();
    return;
  }
  // While stopping, every child is on its way out: whatever its status, that is expected.
  if (!stopping_) {
    auto kind = command_started() ? InstanceOutcome::Kind::kCrashed : InstanceOutcome::Kind::kCouldNotStart;
    std::string tail = c.err_log ? last_lines(c.err_log->tail()) : "";
    if (&c == &vmm_child_) {
      std::string reason =
          std::string(vmm_.name()) + " " + status.describe() + (tail.empty() ? "" : ": " + tail);
      if (console_log_ && status.value == 0 && !status.signalled)
        reason = "the VM powered off before the command ended; its console ends: " +
                 last_lines(console_log_->tail());
      fail(kind, reason);
    } else {
      // abox-net ends when its VMM goes: that exit may be the echo of the VMM's death.
      fail_unless_vmm_died(kind, c.label + " " + status.describe() + (tail.empty() ? "" : ": " + tail));
    }
  }
  if (&c == &vmm_child_) stop_children_after_vmm();
  check_done();
}

void InstanceSupervisor::fail(InstanceOutcome::Kind kind, std::string reason) {
  if (!outcome_set_) {
    outcome_set_ = true;
    outcome_.kind = kind;
    outcome_.reason = reason;
    outcome_.ms_ended = elapsed_ms();
    if (events_) {
      events_->emit("instance_failed",
                    {{"source", "supervisor"}, {"outcome", outcome_kind_name(kind)}, {"reason", reason}});
    }
  }
  begin_stop();
}

void InstanceSupervisor::stop(int signo) {
  if (!outcome_set_) {
    outcome_set_ = true;
    outcome_.kind = InstanceOutcome::Kind::kInterrupted;
    outcome_.signal = signo;
    outcome_.reason = std::string("stopped by ") +
                      (sigabbrev_np(signo) ? std::string("SIG") + sigabbrev_np(signo) : "a signal");
    outcome_.ms_ended = elapsed_ms();
  }
  begin_stop();
}

void InstanceSupervisor::kill_now() {
  stopping_ = true;
  end_execs("the instance was killed before the command ended");
  if (events_) events_->emit("instance", {{"source", "supervisor"}, {"state", "killing"}});
  for (Child* c : {&vmm_child_, &net_, &broker_, &disk_tool_, &copy_tool_}) {
    if (c->running()) c->process->signal(SIGKILL);
  }
  check_done();
}

void InstanceSupervisor::begin_stop() {
  if (stopping_) {
    check_done();
    return;
  }
  stopping_ = true;
  transition(InstanceState::kStopping, outcome_kind_name(outcome_.kind));
  step_timer_.cancel();
  run_timer_.cancel();
  idle_timer_.cancel();
  if (api_acceptor_) {
    boost::system::error_code ignored;
    api_acceptor_->close(ignored);
  }
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  }
  in_.reset();
  if (vmm_child_.running()) {
    if (session_ && session_->open()) {
      session_->send_poweroff();
      poweroff_sent_ = true;
    }
    auto grace = poweroff_sent_ ? config_.stop_grace : std::chrono::milliseconds(0);
    stop_timer_.expires_after(grace);
    stop_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (!*alive || ec) return;
      if (vmm_child_.running()) {
        events_->emit("process", {{"source", "supervisor"},
                                  {"process", "vmm"},
                                  {"event", "killing"},
                                  {"reason", poweroff_sent_ ? "no power-off within the grace" : "stopping"}});
        vmm_child_.process->signal(SIGKILL);
      }
    });
  } else {
    stop_children_after_vmm();
  }
  check_done();
}

void InstanceSupervisor::stop_children_after_vmm() {
  if (!stopping_) return;
  // abox-net ends by itself once its VMM is gone; the broker is told. Both get
  // SIGKILL if they are still there after the grace.
  if (broker_.running()) broker_.process->signal(SIGTERM);
  if (net_.running() && !vmm_child_.process) net_.process->signal(SIGTERM);  // no VMM ever connected
  stop_timer_.expires_after(kChildStopGrace);
  stop_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    for (Child* c : {&net_, &broker_}) {
      if (c->running()) c->process->signal(c == &net_ ? SIGTERM : SIGKILL);
    }
    stop_timer_.expires_after(kChildStopGrace);
    stop_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec2) {
      if (!*alive || ec2) return;
      for (Child* c : {&net_, &broker_}) {
        if (c->running()) c->process->signal(SIGKILL);
      }
    });
  });
}

void InstanceSupervisor::check_done() {
  if (!stopping_ || finished_) return;
  for (Child* c : {&vmm_child_, &net_, &broker_, &disk_tool_, &copy_tool_}) {
    if (c->running()) return;
  }
  if ((out_ && !out_->idle()) || (err_ && !err_->idle()) || (copy_output_ && !copy_output_->idle()))
    return;  // the command's last output is still on its way
  finish();
}

void InstanceSupervisor::finish() {
  finished_ = true;
  stop_timer_.cancel();
  end_execs("the instance stopped before the command ended");
  execs_.reset();
  session_.reset();
  bool failed = outcome_.kind != InstanceOutcome::Kind::kExited;
  state_ = failed ? InstanceState::kFailed : InstanceState::kStopped;
  if (outcome_.kind == InstanceOutcome::Kind::kInterrupted) state_ = InstanceState::kStopped;
  if (events_) {
    events_->emit("instance", {{"source", "supervisor"},
                               {"state", instance_state_name(state_)},
                               {"outcome", outcome_kind_name(outcome_.kind)}});
  }
  write_record();
  outcome_.kept = config_.keep;
  if (folder_ && !config_.keep) {
    events_file_.reset();
    (void)folder_->remove();
  }
  // The handler may destroy this supervisor: run it on the loop, after this returns.
  boost::asio::post(io_, [handler = on_done_, outcome = outcome_] { handler(outcome); });
}

void InstanceSupervisor::write_record() {
  if (!folder_) return;
  std::string js;
  base::JsonWriter w(js);
  w.begin_object()
      .field("name", config_.name)
      .field("state", instance_state_name(state_))
      .field("image", config_.image_name)
      .field("accel", accel_name(config_.accel))
      .field("policy", policy_source_)
      .field("created", base::format_utc_millis(created_wall_));
  if (outcome_set_) {
    w.field("outcome", outcome_kind_name(outcome_.kind));
    if (!outcome_.reason.empty()) w.field("reason", outcome_.reason);
    if (outcome_.exit) {
      w.key("exit")
          .begin_object()
          .field("signalled", outcome_.exit->signalled)
          .field("value", outcome_.exit->value)
          .end_object();
    }
  }
  w.key("processes").begin_object();
  for (const Child* c : {&net_, &broker_, &vmm_child_}) {
    if (!c->process) continue;
    w.key(c->label).begin_object().field("pid", static_cast<std::int64_t>(c->process->pid()));
    w.field("start_ticks", c->process->start_ticks());
    if (auto s = c->process->status()) w.field("status", s->describe());
    w.end_object();
  }
  w.end_object().end_object();
  js.push_back('\n');
  (void)folder_->write_file("instance.json", js);
}

// ---- the writable layer ----

void InstanceSupervisor::start_disk() {
  ChildSpec spec;
  spec.program = config_.mkfs;
  // lazy init: a few milliseconds for any size; the label is how the guest's
  // /init finds it (the image's own root is "abox-root").
  spec.argv = {config_.mkfs,
               "-q",
               "-F",
               "-L",
               "abox-upper",
               "-m",
               "0",
               "-E",
               "lazy_itable_init=1,lazy_journal_init=1",
               folder_->file("disk.ext4")};
  spec.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  auto err = make_pipe();
  spec.fds = {{0, dev_null_.get()}, {1, dev_null_.get()}, {2, err.write.get()}};
  try {
    spawn_child(disk_tool_, spec, base::UniqueFd(), std::move(err.read), "", nullptr);
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, e.what());
  }
}

void InstanceSupervisor::maybe_start_vmm() {
  if (stopping_ || !network_ready_ || !disk_ready_ || vmm_child_.process) return;
  start_vmm();
}

// ---- --copy-in, before go ----

void InstanceSupervisor::next_copy_in() {
  if (stopping_) return;
  if (copy_index_ >= config_.copy_in.size()) {
    if (config_.copy_out_only) {
      transition(InstanceState::kRunning, "copy_out");
      events_->emit("copy_out",
                    {{"source", "supervisor"}, {"guest_path", config_.copy_out_only->guest_path}});
      session_->begin_copy_out(config_.copy_out_only->guest_path, 256 * 1024);
      copy_out_bytes_ = 0;
      return;
    }
    send_go();
    return;
  }
  const CopyIn& c = config_.copy_in[copy_index_];
  std::string host = c.host_path;
  while (host.size() > 1 && host.back() == '/') host.pop_back();
  auto slash = host.rfind('/');
  std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : host.substr(0, slash));
  std::string base = slash == std::string::npos ? host : host.substr(slash + 1);

  ChildSpec spec;
  spec.program = config_.tar;
  // The host's own files, made into a stream by the host's tar: the guest
  // unpacks it, the host never unpacks anything the guest made.
  spec.argv = {config_.tar, "-c", "-f", "-", "-C", parent, "--", base};
  spec.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  auto out = make_pipe();
  auto err = make_pipe();
  spec.fds = {{0, dev_null_.get()}, {1, out.write.get()}, {2, err.write.get()}};
  copy_stream_eof_ = false;
  copy_tool_status_.reset();
  copy_tool_.out.reset();
  try {
    spawn_child(copy_tool_, spec, base::UniqueFd(), std::move(err.read), "", nullptr);
  } catch (const std::exception& e) {
    fail(InstanceOutcome::Kind::kCouldNotStart, std::string("--copy-in ") + c.host_path + ": " + e.what());
    return;
  }
  events_->emit("copy_in",
                {{"source", "supervisor"}, {"host_path", c.host_path}, {"guest_dir", c.guest_dir}});
  session_->begin_copy_in(c.guest_dir);
  // The channel paces the stream: past 1 MiB queued the pipe is not read,
  // so tar waits, until the queue to the guest has drained.
  session_->on_drain([this] {
    if (copy_tool_.out) copy_tool_.out->resume();
  });
  copy_tool_.out = std::make_unique<PipeReader>(
      io_, std::move(out.read),
      [this](std::span<const std::uint8_t> b) {
        if (!session_ || !session_->open()) return;
        session_->send_copy_data(b);
        if (session_->queued_bytes() > (1u << 20)) copy_tool_.out->pause();
      },
      [this] {
        copy_stream_eof_ = true;
        finish_copy_in_stream();
      });
}

void InstanceSupervisor::finish_copy_in_stream() {
  if (!copy_stream_eof_ || !copy_tool_status_ || stopping_) return;
  const CopyIn& c = config_.copy_in[copy_index_];
  if (copy_tool_status_->signalled || copy_tool_status_->value != 0) {
    fail(InstanceOutcome::Kind::kCouldNotStart,
         "--copy-in " + c.host_path + ": tar " + copy_tool_status_->describe() + ": " +
             last_lines(copy_tool_.err_log ? copy_tool_.err_log->tail() : ""));
    return;
  }
  session_->end_copy_in();
}

void InstanceSupervisor::on_copy_in_done(const guest::CopyResult& result) {
  const CopyIn& c = config_.copy_in[copy_index_];
  events_->emit("copy_in_done", {{"source", "box-guest"},
                                 {"host_path", c.host_path},
                                 {"guest_dir", c.guest_dir},
                                 {"ok", result.ok},
                                 {"detail", result.detail}});
  if (!result.ok) {
    fail(InstanceOutcome::Kind::kCouldNotStart, "--copy-in " + c.host_path +
                                                    ": the guest could not unpack it under " + c.guest_dir +
                                                    ": " + result.detail);
    return;
  }
  ++copy_index_;
  next_copy_in();
}

// ---- the instance's API socket: abox cp, exec and a resize while the instance runs ----
//
// <state>/api.sock (0600, the operator's uid only, checked by SO_PEERCRED);
// one request per connection, its first line says which:
//   "ABOX-CP/1 /guest/path\n": "OK\n" or "ERR <message>\n"; after OK, the tar
//     stream as chunks (u32be length, bytes), a chunk of length 0, then
//     "DONE 1 <detail>\n" or "DONE 0 <detail>\n". One copy at a time; the
//     stream is passed through unopened.
//   "ABOX-EXEC/1 {...}\n": an exec session (exec_wire.h has its lines).
//   "ABOX-RESIZE/1 ROWS COLS\n": the main command's window (with -t).

class ApiClient : public std::enable_shared_from_this<ApiClient> {
 public:
  explicit ApiClient(boost::asio::local::stream_protocol::socket s) : socket(std::move(s)) {}
  boost::asio::local::stream_protocol::socket socket;
  std::string request;
  bool gone = false;
};

void InstanceSupervisor::listen_api() {
  using boost::asio::local::stream_protocol;
  std::string path = folder_->file("api.sock");
  ::unlink(path.c_str());
  boost::system::error_code ec;
  api_acceptor_ = std::make_unique<stream_protocol::acceptor>(io_);
  api_acceptor_->open(stream_protocol(), ec);
  if (!ec) api_acceptor_->bind(stream_protocol::endpoint(path), ec);
  if (!ec) api_acceptor_->listen(64, ec);  // execs come several at once
  if (ec) {
    events_->emit("api", {{"source", "supervisor"}, {"error", ec.message()}});
    api_acceptor_.reset();
    return;
  }
  ::chmod(path.c_str(), 0600);
  accept_api();
}

void InstanceSupervisor::accept_api() {
  api_acceptor_->async_accept([this, alive = alive_](const boost::system::error_code& ec,
                                                     boost::asio::local::stream_protocol::socket socket) {
    if (!*alive || ec || stopping_) return;
    ucred peer{};
    socklen_t len = sizeof peer;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
        peer.uid == ::geteuid()) {
      serve_api(std::make_shared<ApiClient>(std::move(socket)));
    }
    accept_api();
  });
}

void InstanceSupervisor::serve_api(std::shared_ptr<ApiClient> client) {
  boost::asio::async_read_until(
      client->socket, boost::asio::dynamic_buffer(client->request, kMaxExecLine + 64), '\n',
      [this, client, alive = alive_](const boost::system::error_code& ec, std::size_t n) {
        if (!*alive || ec) return;
        std::string line = client->request.substr(0, n - 1);
        client->request.erase(0, n);  // what follows the request line (an exec's first input)
        auto reply = [client](std::string text) {
          auto msg = std::make_shared<std::string>(std::move(text));
          boost::asio::async_write(client->socket, boost::asio::buffer(*msg),
                                   [client, msg](const boost::system::error_code&, std::size_t) {});
        };
        if (line.rfind(kExecVerb, 0) == 0)
          return serve_exec(client, std::string_view(line).substr(kExecVerb.size()));
        if (line.rfind(kResizeVerb, 0) == 0)
          return serve_resize(client, std::string_view(line).substr(kResizeVerb.size()));
        if (line.rfind(kPolicyVerb, 0) == 0)
          return serve_policy(client, std::string_view(line).substr(kPolicyVerb.size()));
        constexpr std::string_view kVerb = "ABOX-CP/1 ";
        if (line.rfind(kVerb, 0) != 0)
          return reply("ERR expected ABOX-CP/1, ABOX-EXEC/1, ABOX-RESIZE/1 or ABOX-POLICY/1\n");
        std::string path = line.substr(kVerb.size());
        if (path.empty() || path[0] != '/' || path.size() > guest::kMaxGuestPath)
          return reply("ERR the path must be absolute\n");
        if (!session_ || !session_->open() || state_ != InstanceState::kRunning)
          return reply("ERR the instance is not running\n");
        if (copy_client_ || session_->copy_out_open()) return reply("ERR another copy is in progress\n");
        copy_client_ = client;
        events_->emit("copy_out", {{"source", "supervisor"}, {"guest_path", path}});
        reply("OK\n");
        session_->begin_copy_out(path, 256 * 1024);
      });
}

// ---- exec sessions (exec_client.h, exec_multiplexer.h) ----

std::string InstanceSupervisor::exec_refusal() const {
  if (config_.copy_out_only) return "the instance is not running (it only serves abox cp)";
  if (stopping_ || finished_) return "the instance is stopping";
  if (!session_ || !session_->open() || !execs_) return "the instance is not running";
  // From go on (what `abox run -d` waits for): box-guest starts an exec once
  // the main command is started or starting, never before the self-test.
  if (state_ != InstanceState::kRunning)
    return "the instance is not running its command yet (it is " + std::string(instance_state_name(state_)) +
           ")";
  return "";
}

base::Result<std::string, std::string> InstanceSupervisor::instance_key_text(
    const policy::Policy& policy) const {
  std::string store = config_.credentials_file;
  if (store.empty()) {
    auto path = default_credentials_path();
    if (!path.ok()) return base::Err{"the policy has [[broker]] bindings: " + path.error()};
    store = *path;
  }
  auto file = broker::CredentialFile::read(store);
  if (!file.ok()) {
    if (file.error().missing && config_.credentials_file.empty()) {
      return base::Err{"the policy has [[broker]] bindings and there is no credential store at " + store +
                       ": abox credentials set NAME (or give --credentials FILE)"};
    }
    return base::Err{file.error().message};
  }
  return broker::Credentials::text_for_instance(*file, store, policy);
}

std::string InstanceSupervisor::check_exec_request(const ExecRequest& r) const {
  for (const auto& e : r.env) {
    for (const auto& n : nonce_variables_) {
      if (e.name == n)
        return "-e " + e.name +
               ": the policy's [[broker]] binding puts this instance's nonce there; the guest must send the "
               "nonce, and the broker adds the key on the host";
    }
  }
  if (!has_bindings_) return "";
  // The keys are read again for the check (as prepare() read them) and wiped
  // at once: the shim keeps none in memory between requests.
  auto loaded = policy::load_policy(folder_->policy());
  if (!loaded.ok()) return "the instance's policy copy does not load: " + loaded.error().to_string();
  auto text = instance_key_text(*loaded);
  if (!text.ok()) return text.error();
  std::string problem;
  if (auto creds = broker::Credentials::parse_instance_text(*text, *loaded); !creds.ok()) {
    problem = creds.error();
  } else if (auto clean = check_no_key(r.env, r.argv, creds->all_keys()); !clean.ok()) {
    problem = clean.error();
  }
  broker::wipe(*text);
  return problem;
}

void InstanceSupervisor::serve_exec(std::shared_ptr<ApiClient> client, std::string_view request) {
  auto parsed = parse_exec_request(request);
  auto exec_client = std::make_shared<ExecClient>(std::move(client->socket), std::move(client->request),
                                                  parsed.ok() && parsed->stdin_open);
  std::erase_if(exec_clients_, [](const std::shared_ptr<ExecClient>& c) { return c->closed(); });
  exec_clients_.push_back(exec_client);
  if (!parsed.ok()) return exec_client->refuse("the exec request: " + parsed.error());
  if (auto why = exec_refusal(); !why.empty()) return exec_client->refuse(why);
  if (auto why = check_exec_request(*parsed); !why.empty()) return exec_client->refuse(why);
  std::string command;
  for (const auto& a : parsed->argv) {
    if (command.size() > 256) break;
    command += (command.empty() ? "" : " ") + a;
  }
  if (command.size() > 256) command = command.substr(0, 253) + "...";
  auto id = execs_->open(std::move(*parsed), *exec_client);
  if (!id.ok()) {
    events_->emit("exec_refused", {{"source", "supervisor"}, {"command", command}, {"reason", id.error()}});
    return exec_client->refuse(id.error());
  }
  events_->emit("exec", {{"source", "supervisor"},
                         {"session", static_cast<std::uint64_t>(*id)},
                         {"command", command},
                         {"open", static_cast<std::uint64_t>(execs_->size())}});
  exec_client->start(*execs_, *id);
}

void InstanceSupervisor::serve_resize(std::shared_ptr<ApiClient> client, std::string_view request) {
  auto reply = [client](std::string text) {
    auto msg = std::make_shared<std::string>(std::move(text));
    boost::asio::async_write(client->socket, boost::asio::buffer(*msg),
                             [client, msg](const boost::system::error_code&, std::size_t) {});
  };
  unsigned rows = 0, cols = 0;
  char extra = 0;
  std::string text(request);
  if (std::sscanf(text.c_str(), "%u %u%c", &rows, &cols, &extra) != 2 || rows > 0xFFFF || cols > 0xFFFF)
    return reply("ERR expected ABOX-RESIZE/1 ROWS COLS\n");
  if (!config_.tty) return reply("ERR the command has no terminal (started without -t)\n");
  if (stopping_) return reply("ERR the instance is stopping\n");
  resize(static_cast<std::uint16_t>(rows), static_cast<std::uint16_t>(cols));
  reply("OK\n");
}

void InstanceSupervisor::serve_policy(std::shared_ptr<ApiClient> client, std::string_view request) {
  auto reply = [client](std::string text) {
    auto msg = std::make_shared<std::string>(std::move(text));
    boost::asio::async_write(client->socket, boost::asio::buffer(*msg),
                             [client, msg](const boost::system::error_code&, std::size_t) {});
  };
  if (request.empty() || request.front() != '/' || request.size() > kMaxPolicyPath ||
      request.find('\0') != std::string_view::npos)
    return reply("ERR expected ABOX-POLICY/1 /ABSOLUTE/PATH\n");
  policy_source_ = std::string(request);
  write_record();
  reply("OK\n");
}

void InstanceSupervisor::end_execs(const std::string& reason) {
  if (execs_) execs_->close_all(reason);
  // Each is held by its pending reads and writes from here (its end line, the client's EOF).
  for (auto& c : exec_clients_) c->abandon();
  exec_clients_.clear();
}

void InstanceSupervisor::on_copy_out_data(std::span<const std::uint8_t> bytes) {
  auto n = static_cast<std::uint32_t>(bytes.size());
  if (config_.copy_out_only) {
    copy_out_bytes_ += n;
    if (copy_out_bytes_ > config_.copy_out_only->max_bytes) {
      fail(InstanceOutcome::Kind::kExited, "the stream passed --max-bytes (" +
                                               std::to_string(config_.copy_out_only->max_bytes) +
                                               " bytes): stopped");
      return;
    }
    copy_output_->write(bytes, [this, n, alive = alive_] {
      if (!*alive) return;
      if (session_ && session_->open()) session_->grant_copy(n);
      check_done();
    });
    return;
  }
  if (!copy_client_ || copy_client_->gone) {
    // The reader left: the guest's stream is drained and dropped.
    if (session_ && session_->open()) session_->grant_copy(n);
    return;
  }
  auto chunk = std::make_shared<std::vector<std::uint8_t>>();
  chunk->reserve(4 + bytes.size());
  for (int shift = 24; shift >= 0; shift -= 8) chunk->push_back(static_cast<std::uint8_t>(n >> shift));
  chunk->insert(chunk->end(), bytes.begin(), bytes.end());
  auto client = copy_client_;
  boost::asio::async_write(
      client->socket, boost::asio::buffer(*chunk),
      [this, client, chunk, n, alive = alive_](const boost::system::error_code& ec, std::size_t) {
        if (!*alive) return;
        if (ec) client->gone = true;
        if (session_ && session_->open()) session_->grant_copy(n);
      });
}

void InstanceSupervisor::on_copy_out_done(const guest::CopyResult& result) {
  events_->emit("copy_out_done", {{"source", "box-guest"}, {"ok", result.ok}, {"detail", result.detail}});
  if (config_.copy_out_only) {
    if (!outcome_set_) {
      outcome_set_ = true;
      outcome_.kind = InstanceOutcome::Kind::kExited;
      outcome_.exit = guest::Exited{guest::kMainSession, false, result.ok ? 0u : 1u};
      if (!result.ok) outcome_.reason = result.detail;
      outcome_.ms_ended = elapsed_ms();
    }
    begin_stop();
    return;
  }
  auto client = std::move(copy_client_);
  if (!client || client->gone) return;
  std::string detail = result.detail;
  for (char& ch : detail) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  auto tail = std::make_shared<std::string>(std::string(4, '\0') + "DONE " + (result.ok ? "1 " : "0 ") +
                                            detail + "\n");
  boost::asio::async_write(client->socket, boost::asio::buffer(*tail),
                           [client, tail](const boost::system::error_code&, std::size_t) {
                             boost::system::error_code ignored;
                             client->socket.shutdown(boost::asio::socket_base::shutdown_both, ignored);
                           });
}

// ---- --idle-timeout: nothing from the command and no frames through abox-net ----

void InstanceSupervisor::poll_idle() {
  idle_timer_.expires_after(std::chrono::seconds(1));
  idle_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec || stopping_) return;
    using boost::asio::local::stream_protocol;
    auto socket = std::make_shared<stream_protocol::socket>(io_);
    auto text = std::make_shared<std::string>();
    socket->async_connect(
        stream_protocol::endpoint(folder_->file("net.stats")),
        [this, socket, text, alive](const boost::system::error_code& cec) {
          if (!*alive || stopping_) return;
          if (cec) return poll_idle();
          // abox-net's stats socket answers a request line ("stats" or
          // "explain TARGET"); unasked, it waits, and so would this poll.
          static constexpr std::string_view kRequest = "stats\n";
          boost::system::error_code wec;
          boost::asio::write(*socket, boost::asio::buffer(kRequest.data(), kRequest.size()), wec);
          if (wec) return poll_idle();
          boost::asio::async_read(
              *socket, boost::asio::dynamic_buffer(*text, 1 << 16),
              [this, socket, text, alive](const boost::system::error_code&, std::size_t) {
                if (!*alive || stopping_) return;
                auto counter = [&](std::string_view key) -> std::uint64_t {
                  std::string k = "\"" + std::string(key) + "\":";
                  auto at = text->find(k);
                  return at == std::string::npos ? 0
                                                 : std::strtoull(text->c_str() + at + k.size(), nullptr, 10);
                };
                std::uint64_t frames = counter("frames_in") + counter("frames_out");
                // An exec's output is the instance in use too (an operator at a shell in it).
                std::uint64_t output = outcome_.stdout_bytes + outcome_.stderr_bytes + exec_output_bytes_;
                auto now = std::chrono::steady_clock::now();
                if (frames != last_frames_ || output != last_output_) last_activity_ = now;
                last_frames_ = frames;
                last_output_ = output;
                if (now - last_activity_ >= *config_.idle_timeout) {
                  fail(InstanceOutcome::Kind::kTimedOut,
                       "nothing came from the command and nothing crossed the network for " +
                           std::to_string(config_.idle_timeout->count() / 1000) + " s (--idle-timeout)");
                  return;
                }
                poll_idle();
              });
        });
  });
}

void InstanceSupervisor::resize(std::uint16_t rows, std::uint16_t cols) {
  if (!config_.tty || stopping_) return;
  // Before setup went, the pty starts at this size; from setup on, box-guest
  // takes it whenever it comes (before go too). The channel drops it before setup.
  setup_.window = {rows, cols};
  if (session_ && session_->open()) session_->send_resize(guest::kMainSession, rows, cols);
}

}  // namespace abox::engine
