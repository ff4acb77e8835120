// Selftest: the probes setup asks for, run inside the guest before the
// command (docs/control-protocol.md, "The self-test"). Each proves that one
// way out is refused; one that gets through fails the self-test.
//
//   denied_name       an A query for the target to the resolver the lease
//                     named (port 53): passes on an answer with no A record
//                     (REFUSED, NXDOMAIN, NOERROR with none), on ICMP
//                     unreachable, or on no answer within the timeout; fails
//                     on any A record, and on a truncated answer without one
//                     (it cannot show there is none).
//   direct_address    a TCP connect to ADDR:PORT: passes when it fails
//                     (refused, reset, unreachable) or gets no answer within
//                     the timeout; fails when it connects.
//   foreign_resolver  an A query for example.com sent straight to ADDR:PORT
//                     over UDP: passes when nothing at all comes back within
//                     the timeout (an ICMP error is noted and waited past:
//                     an answer may still come); fails on any datagram.
//   nonce_in_env      passes when setup's env gives the variable a value
//                     that is an abox nonce; the value is never echoed.
//
// Without a network the three network probes are skipped (outcome 2) with
// the reason; a target that does not parse is skipped too. Replies that are
// not answers to the probe's query (another ID, another question) are
// ignored and counted in the detail.
//
// Sans-loop: all probes run at once on the caller's poll loop. The caller
// adds add_poll_fds() to its poll set, hands the results to on_poll(), and
// calls on_time() when next_deadline() has passed; every probe ends by its
// deadline (timeout_ms after start), so the whole self-test takes at most
// one timeout. Each probe owns at most one socket.
#pragma once

#include <poll.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/unique_fd.h"
#include "guest/box_guest/probe_target.h"
#include "guest/protocol/messages.h"

namespace abox::guest {

struct SelftestContext {
  bool network_up = false;
  std::optional<std::uint32_t> dns_server;  // host byte order
  std::uint16_t dns_port = 53;
  std::vector<EnvEntry> env;  // setup's
  int timeout_ms = 2000;
};

class Selftest {
 public:
  Selftest(const std::vector<Probe>& probes, SelftestContext context, base::RandomSource& random,
           std::int64_t now_ms);

  void add_poll_fds(std::vector<pollfd>& out) const;
  void on_poll(std::span<const pollfd> polled, std::int64_t now_ms);
  void on_time(std::int64_t now_ms);
  std::optional<std::int64_t> next_deadline() const;
  bool done() const;
  SelftestReport report() const;

 private:
  struct Run {
    Probe probe;
    ProbeResult result;
    base::UniqueFd fd;
    short events = 0;
    std::int64_t started = 0;
    std::int64_t deadline = 0;
    bool finished = false;
    std::uint16_t query_id = 0;
    std::string query_name;
    std::string note;  // an ICMP error seen, replies ignored
    int ignored = 0;
  };

  void start(Run& run, base::RandomSource& random);
  void start_query(Run& run, const SocketAddress& to, std::string_view name, base::RandomSource& random);
  void readable_denied_name(Run& run, std::int64_t now_ms);
  void writable_direct_address(Run& run);
  void readable_foreign_resolver(Run& run, std::int64_t now_ms);
  void timed_out(Run& run);
  static void finish(Run& run, ProbeOutcome outcome, std::string detail);

  SelftestContext context_;
  std::vector<Run> runs_;
};

}  // namespace abox::guest
