// Daemon: the operator's `abox daemon`. One per uid (daemon.lock), one
// Boost.Asio io_context, one thread. It serves the API of docs/api.md on
// daemon.sock (0600; every peer's SO_PEERCRED uid must be this uid, else one
// error line and the connection is closed, and the refusal is counted) and
// owns the detached instances through their shims (shim.h).
//
// The registry is the state folders: nothing about an instance lives only in
// the daemon's memory. The daemon holds one pidfd per live shim, from the
// pid and start time in shim.json (instance_files.h), and nothing else that
// a restart would lose:
//   - at start it scans ROOT/*: a shim found alive is adopted (watched by its
//     pidfd); an instance whose shim is gone while its record says it runs
//     is marked failed. So no instance is orphaned (every live shim is found)
//     or duplicated (start refuses a name whose shim lives);
//   - a shim that ends is dropped; if it ended without the supervisor's last
//     record (killed), the instance is marked failed.
// Cgroups: the shim puts its instance in a cgroup of abox-helper's when one
// answers (instance_cgroup.h); the daemon deletes it once the instance has
// ended (its shim gone), at start for any it finds left (a state folder whose
// shim is gone, or a name in the leftovers list, cgroup_sweeper.h).
// The daemon never stops instances when it stops itself: SIGTERM or SIGINT
// closes the socket and exits, the shims run on.
//
// Every request is answered with its id; streams (logs, events) send data
// messages and then {"id":N,"done":true}. A connection may have several
// requests in flight. Bounds: kMaxClients connections, kMaxRequestBytes a
// line, kMaxQueuedBytes of replies queued to one client (a stream pauses
// reading its file past it; an exec, reading its shim's lines).
//
// An exec (exec_relay.h) is a connection to the instance's api.sock, held
// by the client's connection: it ends with its command, or when the client
// goes (then the shim kills the command). The main command's window
// (`resize`) goes the same way, one line and its answer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "engine/daemon/api_request.h"
#include "engine/daemon/cgroup_sweeper.h"
#include "engine/daemon/daemon_paths.h"
#include "engine/daemon/instance_files.h"

namespace abox::engine {

inline constexpr std::size_t kMaxClients = 64;
inline constexpr std::size_t kMaxQueuedBytes = 1 << 20;

class Daemon {
 public:
  struct Options {
    DaemonPaths paths;
    std::string instances_root;
    std::string abox;  // this program, for `abox shim`
    std::vector<std::string> shim_env;
    // abox-helper's socket (helper_socket_path()), for deleting the cgroups
    // of instances that ended (instance_cgroup.h).
    std::string helper_socket;
  };
  Daemon(boost::asio::io_context& io, Options options);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  // Takes the lock, adopts the live shims, listens. The error says why not.
  base::Result<void, std::string> start();
  // Stops listening and removes the socket; the shims run on.
  void close();

  class Client;
  struct Follow;

 private:
  struct Shim {
    std::string name;
    ShimRecord record;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;
    std::vector<std::function<void()>> on_exit;
    // abox attach's input: the connection to the shim's shim.sock, made on the first input.
    std::unique_ptr<boost::asio::local::stream_protocol::socket> input;
    bool input_busy = false;
  };

  void adopt_all();
  void watch(std::string name, ShimRecord record, base::UniqueFd pidfd);
  // A shim that lives but is not watched (it wrote shim.json after this
  // daemon's scan, while a daemon restarted): watched from now on.
  void adopt_if_alive(const std::string& name);
  void on_shim_exit(const std::string& name);
  void mark_failed_unless_ended(const std::string& name, const std::string& reason);
  base::Result<ShimRecord, std::string> spawn_shim(const std::string& name, bool again);

  // Cgroups (instance_cgroup.h, cgroup_sweeper.h): an instance that does not
  // run and whose record says it may have one gets its name listed in
  // leftovers_ (before its folder can go); a sweep asks the helper to delete
  // the listed ones, again every kSweepRetry while one is busy (its last
  // processes dying), at most kSweepRetries times in a row.
  void note_cgroup_leftover(const std::string& name);
  void sweep_cgroups_soon();
  void sweep_cgroups_now();

  void accept();
  void read_request(std::shared_ptr<Client> client);
  void handle(std::shared_ptr<Client> client, const ApiRequest& r);

  void op_ping(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_run(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_list(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_inspect(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_stop(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_start(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_remove(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_stream(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_stats(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_input(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_exec(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_exec_input(std::shared_ptr<Client> c, const ApiRequest& r);
  void op_resize(std::shared_ptr<Client> c, const ApiRequest& r);
  void pump(std::shared_ptr<Follow> f);

  // Ends the shim: SIGTERM (or SIGKILL with kill_now), SIGKILL after the
  // grace, then done() once it is gone.
  void end_shim(const std::string& name, bool kill_now, std::function<void()> done);
  // The instance as `ls` and `inspect` show it (the record, corrected by whether its shim lives).
  std::string describe(const std::string& name, bool full) const;
  bool exists(const std::string& name) const;
  std::string folder(const std::string& name) const { return options_.instances_root + "/" + name; }

  boost::asio::io_context& io_;
  Options options_;
  base::UniqueFd lock_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::map<std::string, std::unique_ptr<Shim>> shims_;
  std::size_t clients_ = 0;
  std::uint64_t refused_peers_ = 0, bad_requests_ = 0, requests_ = 0;
  CgroupLeftovers leftovers_;
  std::unique_ptr<boost::asio::steady_timer> sweep_timer_;
  bool sweep_scheduled_ = false;
  int sweep_busy_rounds_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace abox::engine
