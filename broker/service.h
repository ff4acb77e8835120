// BrokerService: the TLS broker of one instance, as a running service.
//
// Owns everything the connections share (runtime.h): the loop, the CA and
// its leaf cache, the server and upstream TLS contexts, the resolver, the
// injection gate and nonce table, accounting, and the listening socket.
// Startup (create) validates everything and fails with a message; after
// that nothing on the data path throws or blocks.
//
// Live reload: `--control-socket PATH` takes "reload SOURCE" with a new
// policy's text (control_socket.h); the broker cannot get keys it did not
// start with, so a reload removes and restores bindings, and refuses
// anything else a restart would need (binding_reload.h).
//
// Listeners:
//   unix:PATH     abox-net connects here; each connection starts with the
//                 hand-off line (base/broker_handoff.h). The socket file is
//                 created mode 0600 (the operator's abox-net only).
//   ADDR:PORT     TCP, for using the broker directly: no hand-off line, the
//                 SNI picks the binding.
// Bounds: connections open, TLS handshakes in progress (past either, a new
// connection is closed at once and counted), leaves cached, head and body
// size (policy [limits]), handshake / connect / idle timeouts.
// Stats: SIGUSR1 appends the accounting JSON (one line, one write) to the
// stats file (opened at startup, so a sandboxed broker opens nothing later)
// or writes it to stderr; every kStatsInterval, on SIGUSR1 and at the end,
// each binding's counters also go to the event log as one flat
// "broker_stats" event.
//
// Sandbox: enter_sandbox() confines the process once create() has done
// everything that needs the filesystem (broker/sandbox.h); the caller calls
// it before announcing that it listens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/event_log.h"
#include "base/result.h"
#include "policy/policy.h"

namespace abox::broker {

struct BrokerOptions {
  std::string instance = "default";
  std::string policy_file;
  std::string credentials_file;  // `--credentials FILE`: an operator's standalone run
  int credentials_fd = -1;       // `--credentials-fd N` (the engine's way): read once, then closed
  std::string state_dir;
  std::string listen;          // "unix:PATH" or "ADDR:PORT"
  std::string upstream_ca;     // extra trust for the upstream (tests)
  std::string stats_file;      // where SIGUSR1 appends the stats ("" = stderr): opened at startup
  std::string control_socket;  // "" = none; else a unix socket for `reload` (control_socket.h)
  std::size_t max_connections = 1024;
  std::size_t max_handshakes = 64;
  std::size_t max_leaves = 64;
};

class BrokerService {
 public:
  static constexpr int kStatsIntervalSeconds = 60;

  // Error: a message naming what is wrong (a file, a permission, a port).
  static base::Result<std::unique_ptr<BrokerService>, std::string> create(const BrokerOptions& options,
                                                                          base::EventLog& events);
  ~BrokerService();
  BrokerService(const BrokerService&) = delete;
  BrokerService& operator=(const BrokerService&) = delete;

  // Drops every privilege and installs the broker's seccomp filter
  // (sandbox.h). After it, the socket file of a unix listener stays behind
  // at exit (the next broker replaces it).
  base::Result<void, std::string> enter_sandbox();
  // Runs until SIGTERM / SIGINT. Returns when stopped.
  void run();
  // The accounting table as one JSON object.
  std::string stats_json() const;
  // A policy reload (binding_reload.h), on the loop's thread: text is
  // validated as a whole (errors as SOURCE:line:column), then the bindings
  // it no longer has are refused from the next request on (403,
  // binding_removed). The reply is the control socket's: "0\n" applied,
  // "1\n" refused (nothing changed), then what happened, one line each:
  // "applied SOURCE: N of M bindings in force", "removed NAME:PORT",
  // "restored NAME:PORT", "note: ...". A "broker_policy" event says the same.
  std::string reload_policy(std::string_view source, std::string_view text);
  // Where it listens, resolved ("127.0.0.1:40123" when port 0 was asked).
  const std::string& listening_on() const;

  struct Impl;

 private:
  explicit BrokerService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `abox broker ca`: the instance CA's certificate (PEM), creating the CA in
// `state_dir` on first use (the guest image can be made before the broker
// first runs). Error: a message.
base::Result<std::string, std::string> instance_ca_pem(const std::string& state_dir,
                                                       std::string_view instance);

// `abox broker nonces`: one nonce per binding of `policy`, from the instance
// secret in `state_dir` (created on first use), in policy order.
struct BindingNonce {
  std::string name;
  std::uint16_t port = 443;
  std::string credential;
  std::string env;  // the binding's nonce_env
  std::string nonce;
};
base::Result<std::vector<BindingNonce>, std::string> binding_nonces(const policy::Policy& policy,
                                                                    const std::string& state_dir);

}  // namespace abox::broker
