// InstanceSupervisor: one instance's life, from nothing to nothing, on one
// Boost.Asio io_context (no threads, no blocking calls, no globals, so the
// daemon can host many side by side).
//
// Deny first, each step waiting for the one before:
//   1. abox-net starts with the policy and says "ready" (its stream socket listens);
//   2. with [[broker]] bindings, the broker starts and says "listening";
//   3. the VMM starts, its only NIC on abox-net's socket, its control port on ours;
//   4. box-guest says hello; it gets setup: the per-boot key, the nonces, the CA,
//      the environment, the command, the self-test;
//   5. the self-test passes (or --no-selftest), and only then `go`.
// Nothing secret is on any command line: the supervisor reads the credential
// store (or --credentials FILE) and hands the broker only the keys of this
// instance's bindings, in a sealed memfd the broker reads once at start as
// fd 3 (--credentials-fd 3): no key and no path to the store in its argv or
// environment. Nonces and the per-boot key travel only in setup.
//
// Every child (abox-net, broker, VMM) is held by a pidfd and watched on the
// io_context; a death the supervisor did not ask for fails the instance with
// the reason (and the tail of the child's stderr), and the others are
// stopped. Stopping: `poweroff` to box-guest, then after stop_grace a SIGKILL
// to the VMM by its pidfd; abox-net ends when its VMM goes (else SIGTERM, then
// SIGKILL); the broker gets SIGTERM. The states and every transition are
// events (kind "instance"), in the one events.jsonl that abox-net's and the
// broker's events also go to; instance.json is rewritten at each transition.
//
// While the command runs, the instance's api.sock (0600, this uid) serves
// `abox cp`, exec sessions (exec_client.h: each an ExecClient, routed by the
// ExecMultiplexer over the control channel, docs/control-protocol.md
// "Command sessions"; refused until the command runs) and the window of a
// -t command (a size taken at any time). Guest frames for the main session
// (0) are the instance's own; the others go to the multiplexer; frames for
// a session never opened are counted and logged. When the channel goes,
// every exec ends with abox's reason. `abox policy apply` says there which
// file it applied (instance.json's "policy" names it from then on).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/event_log.h"
#include "base/unique_fd.h"
#include "engine/instance/control_session.h"
#include "engine/instance/exec_multiplexer.h"
#include "engine/instance/host_output.h"
#include "engine/instance/instance_config.h"
#include "engine/instance/selftest_plan.h"
#include "engine/instance/state_folder.h"
#include "engine/process/child_process.h"
#include "engine/process/child_watch.h"
#include "engine/process/pipe_reader.h"
#include "policy/policy.h"

namespace abox::engine {

enum class InstanceState {
  kCreated,
  kStartingNetwork,
  kStartingBroker,
  kStartingVmm,
  kBooting,
  kSelftest,
  kRunning,
  kStopping,
  kStopped,
  kFailed,
};
std::string_view instance_state_name(InstanceState s);

struct InstanceOutcome {
  enum class Kind {
    kExited,             // the command ran and ended (exit holds how)
    kCouldNotStart,      // setup, abox-net, the broker, the VMM or the boot failed
    kCommandNotStarted,  // box-guest could not start the command (start_failure)
    kSelftestFailed,
    kTimedOut,
    kCrashed,      // after the command started: the VMM, abox-net or the broker died, or the channel broke
    kInterrupted,  // stopped on the operator's request (signal)
  };
  Kind kind = Kind::kCouldNotStart;
  std::optional<guest::Exited> exit;
  std::optional<guest::StartFailed> start_failure;
  int signal = 0;  // kInterrupted: the signal abox got
  std::string reason;
  std::vector<guest::ProbeResult> selftest;
  std::vector<std::string> selftest_failures;
  std::vector<std::string> selftest_skipped;
  std::string state_folder;
  bool kept = false;
  std::string accel;
  // Milliseconds from start() to each milestone (-1: not reached).
  std::int64_t ms_network_ready = -1, ms_vmm_started = -1, ms_hello = -1, ms_command_started = -1,
               ms_first_output = -1, ms_ended = -1;
  std::uint64_t stdout_bytes = 0, stderr_bytes = 0;
  std::uint64_t forged_frames = 0;
  std::uint64_t unknown_session_frames = 0;  // guest frames for a session that is not open (dropped)
};
std::string_view outcome_kind_name(InstanceOutcome::Kind k);

class InstanceSupervisor final : private ControlSession::Listener {
 public:
  using DoneHandler = std::function<void(const InstanceOutcome&)>;
  // stdio_fds: where the command's stdin comes from and its stdout and stderr
  // go (this process's 0, 1, 2 for `abox run`). events_extra_fd: a second copy
  // of every event line (--events), or -1.
  InstanceSupervisor(boost::asio::io_context& io, InstanceConfig config, const Vmm& vmm, int stdin_fd,
                     int stdout_fd, int stderr_fd, int events_extra_fd, DoneHandler on_done);
  InstanceSupervisor(const InstanceSupervisor&) = delete;
  InstanceSupervisor& operator=(const InstanceSupervisor&) = delete;
  ~InstanceSupervisor() override;

  void start();
  // Stops in order (poweroff, grace, kill); the outcome says interrupted by signo.
  void stop(int signo);
  // The operator's terminal changed size (with a tty): at any time, the
  // command's start included (a size that comes before it is its first).
  void resize(std::uint16_t rows, std::uint16_t cols);
  // Can an exec be opened now: "" when the main command runs, else why not.
  std::string exec_refusal() const;
  // Kills every child now.
  void kill_now();

  InstanceState state() const { return state_; }
  const std::string& state_folder_path() const { return folder_path_; }

 private:
  // Listener
  void on_hello(const guest::Hello& hello) override;
  void on_selftest(const guest::SelftestReport& report) override;
  void on_started(const guest::Started& started) override;
  void on_start_failed(const guest::StartFailed& failed) override;
  void on_output(std::uint32_t session, bool is_stderr, std::span<const std::uint8_t> bytes) override;
  void on_exited(const guest::Exited& exited) override;
  void on_guest_log(std::string_view text) override;
  void on_stdin_credit(std::uint32_t session, std::uint32_t bytes) override;
  void on_forged_frame(std::string_view reason) override;
  void on_unknown_session(std::string_view message, std::uint32_t session) override;
  void on_closed(std::string_view reason) override;
  void on_copy_in_done(const guest::CopyResult& result) override;
  void on_copy_out_data(std::span<const std::uint8_t> bytes) override;
  void on_copy_out_done(const guest::CopyResult& result) override;

  struct Child {
    explicit Child(std::string l) : label(std::move(l)) {}
    std::string label;  // "abox-net", "broker", "vmm"
    std::optional<ChildProcess> process;
    std::unique_ptr<ChildWatch> watch;
    std::unique_ptr<PipeReader> out, err;
    std::unique_ptr<LineSplitter> lines;
    std::unique_ptr<TailLog> err_log;
    bool running() const { return process && process->running(); }
  };

  void prepare();  // throws std::runtime_error with the reason
  void start_network();
  void start_broker();
  void start_disk();
  void maybe_start_vmm();
  void start_vmm();
  void next_copy_in();
  void finish_copy_in_stream();
  void listen_api();
  void accept_api();
  void serve_api(std::shared_ptr<class ApiClient> client);
  void serve_exec(std::shared_ptr<class ApiClient> client, std::string_view request);
  void serve_resize(std::shared_ptr<class ApiClient> client, std::string_view request);
  void serve_policy(std::shared_ptr<class ApiClient> client, std::string_view request);
  // The channel is gone: every exec ends, with this reason, and its client is let go.
  void end_execs(const std::string& reason);
  // An exec's -e entries and argv: refused as abox run refuses them (a nonce
  // variable set, a key from the credentials file anywhere). "" when fine.
  std::string check_exec_request(const ExecRequest& r) const;
  // The keys of this instance's bindings, as text for the broker, from the
  // store (or --credentials FILE). The caller wipes it (broker::wipe).
  base::Result<std::string, std::string> instance_key_text(const policy::Policy& policy) const;
  void poll_idle();
  void accept_control();
  void send_go();
  void pump_stdin();

  void spawn_child(Child& c, const ChildSpec& spec, base::UniqueFd out_read, base::UniqueFd err_read,
                   const std::string& log_path, std::function<void(std::string_view)> on_line);
  void on_child_exit(Child& c, const ExitStatus& status);

  void transition(InstanceState s, std::string_view reason = {});
  void fail(InstanceOutcome::Kind kind, std::string reason);
  void fail_unless_vmm_died(InstanceOutcome::Kind kind, std::string reason);
  void begin_stop();
  void stop_children_after_vmm();
  void check_done();
  void finish();
  void write_record();
  void emit_line(std::string_view line);
  std::int64_t elapsed_ms() const;
  bool command_started() const { return outcome_.ms_command_started >= 0; }

  boost::asio::io_context& io_;
  InstanceConfig config_;
  // instance.json's "policy": the file the instance started with, or the one `abox policy apply` applied.
  std::string policy_source_;
  const Vmm& vmm_;
  DoneHandler on_done_;
  int stdin_fd_, stdout_fd_, stderr_fd_;
  int events_extra_fd_;

  InstanceState state_ = InstanceState::kCreated;
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::system_clock::time_point created_wall_;
  std::optional<StateFolder> folder_;
  std::string folder_path_;
  base::UniqueFd events_file_;
  std::unique_ptr<base::EventLog> events_;
  std::unique_ptr<TailLog> console_log_;
  std::unique_ptr<PipeReader> console_reader_;

  bool has_bindings_ = false;
  // The broker's keys as it reads them (broker::Credentials::text_for_instance),
  // from prepare() until written into its memfd in start_broker(); wiped then.
  std::string broker_keys_;
  guest::Setup setup_;
  SelftestPlan plan_;

  Child net_{"abox-net"};
  Child broker_{"broker"};
  Child vmm_child_{"vmm"};
  Child disk_tool_{"mkfs"};  // formats the writable layer, once
  Child copy_tool_{"tar"};   // the host's tar making one --copy-in stream
  bool network_ready_ = false, disk_ready_ = true;
  std::size_t copy_index_ = 0;
  bool copy_stream_eof_ = false;
  std::optional<ExitStatus> copy_tool_status_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> api_acceptor_;
  std::shared_ptr<class ApiClient> copy_client_;  // the `abox cp` being served
  std::uint64_t last_frames_ = 0;
  std::uint64_t last_output_ = 0;
  std::chrono::steady_clock::time_point last_activity_;
  base::UniqueFd dev_null_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::unique_ptr<ControlSession> session_;
  std::unique_ptr<ExecMultiplexer> execs_;                       // the exec sessions (with session_)
  std::vector<std::shared_ptr<class ExecClient>> exec_clients_;  // their api.sock clients, until closed
  std::vector<std::string> nonce_variables_;                     // names an exec's -e may not set
  std::uint64_t exec_output_bytes_ = 0;  // what the execs printed: activity for --idle-timeout
  std::unique_ptr<HostOutput> out_, err_;
  std::unique_ptr<HostInput> in_;
  std::unique_ptr<HostOutput> copy_output_;  // copy_out_only: where the stream goes
  std::uint64_t copy_out_bytes_ = 0;
  std::string upper_disk_;  // the writable layer the VM gets

  boost::asio::steady_timer step_timer_;   // the current start-up step's deadline
  boost::asio::steady_timer run_timer_;    // --timeout
  boost::asio::steady_timer cause_timer_;  // an echo of a VMM death waits for the VMM's pidfd
  boost::asio::steady_timer idle_timer_;   // --idle-timeout's once-a-second look
  boost::asio::steady_timer stop_timer_;   // grace before the kills

  InstanceOutcome outcome_;
  bool outcome_set_ = false;
  bool stopping_ = false;
  bool finished_ = false;
  bool poweroff_sent_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
