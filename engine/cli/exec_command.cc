// `abox exec [-i] [-t] [-e NAME=VALUE]... [-w DIR] [-u UID[:GID]] NAME -- CMD [ARGS...]`:
// CMD beside NAME's main command, through the daemon's API (docs/api.md,
// "exec"): one exec request (a stream of started, stdout, stderr and the
// end), exec_input requests for stdin (one in flight at a time: the daemon
// answers once the bytes are in the shim's socket, the backpressure), and
// exec_resize / exec_signal. Exits with CMD's status (exec_exit_code).
//
// -t: a pty in the guest; with -i and a terminal here, this terminal goes
// raw while CMD runs (TerminalMode restores it on every way out), and its
// size is followed (SIGWINCH). SIGINT, SIGTERM and SIGHUP are passed to CMD
// (exec_signal); a second one of them ends abox exec at once, and with its
// connection gone the shim kills CMD.
#include "engine/cli/exec_command.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>

#include "engine/cli/options.h"
#include "engine/cli/signal_watch.h"
#include "engine/cli/terminal_mode.h"
#include "engine/daemon/api_request.h"
#include "engine/daemon/base64.h"
#include "engine/daemon/daemon_client.h"
#include "engine/instance/guest_environment.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

constexpr std::string_view kUsage =
    "usage: abox exec [options] NAME [--] CMD [ARGS...]\n"
    "\n"
    "Runs CMD in the running instance NAME, beside its main command (as docker exec\n"
    "does): as uid 1000, with the instance's environment (its nonces and CA variables\n"
    "included), in /home/agent, its stdout and stderr here, kept apart. Through the\n"
    "daemon, which asks the instance's shim; box-guest runs up to 16 execs at once.\n"
    "\n"
    "Options:\n"
    "  -i, --interactive        forward stdin to CMD (with backpressure; EOF closes it)\n"
    "  -t, --tty                give CMD a terminal in the guest (with -i: this terminal in\n"
    "                           raw mode, its size followed)\n"
    "  -e, --env NAME=VALUE     set a variable for CMD, on top of the instance's (repeatable)\n"
    "  -w, --workdir DIR        CMD's working directory in the guest (default: /home/agent)\n"
    "  -u, --user UID[:GID]     run CMD as this uid (and gid; default 1000:1000), never with\n"
    "                           capabilities\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are passed to CMD; a second one ends abox exec at once,\n"
    "and CMD is killed. CMD ends when abox exec goes away; it also ends when the\n"
    "instance's main command does (every exec goes with it).\n"
    "\n"
    "Exit status: CMD's (128+N when signal N ended it); 125 abox could not run CMD\n"
    "(usage, the daemon, no such instance, it is not running, 16 execs run already, the\n"
    "instance stopped before CMD ended); 126 CMD is not executable; 127 CMD was not found.\n";

constexpr OptionSpec kOptions[] = {
    {"interactive", 'i', false}, {"tty", 't', false}, {"env", 'e', true},
    {"workdir", 'w', true},      {"user", 'u', true},
};

int fail(const std::string& message) {
  std::cerr << "abox exec: " << message << '\n';
  return kExecFailed;
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

}  // namespace

int exec_exit_code(const json::object& done) {
  if (auto* e = done.if_contains("exit"); e != nullptr && e->is_object()) {
    const auto& o = e->get_object();
    auto* sig = o.if_contains("signalled");
    auto* value = o.if_contains("value");
    if (value == nullptr || !value->is_number()) return kExecFailed;
    auto v = value->to_number<std::int64_t>();
    if (sig != nullptr && sig->is_bool() && sig->get_bool())
      return v >= 1 && v <= 64 ? 128 + static_cast<int>(v) : kExecFailed;
    return v >= 0 && v <= 255 ? static_cast<int>(v) : kExecFailed;
  }
  if (auto* f = done.if_contains("start_failed"); f != nullptr && f->is_object()) {
    auto* reason = f->get_object().if_contains("reason");
    std::string r = reason != nullptr && reason->is_string() ? std::string(reason->get_string()) : "";
    if (r == "not_found") return kExecNotFound;
    if (r == "not_executable") return kExecNotExecutable;
  }
  return kExecFailed;
}

int run_exec_command(std::span<const std::string_view> args) {
  auto parsed = parse_options(args, kOptions, /*stop_at_positional=*/true);
  if (!parsed.ok()) return fail(parsed.error() + " (see 'abox exec --help')");
  if (parsed->help) {
    std::cout << kUsage;
    return 0;
  }
  std::vector<std::string> rest = parsed->positionals;
  if (rest.empty())
    return fail("give NAME and CMD: abox exec [options] NAME -- CMD [ARGS...] (see 'abox exec --help')");
  const std::string name = rest.front();
  rest.erase(rest.begin());
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty() || rest.front().empty())
    return fail("no command: abox exec [options] NAME -- CMD [ARGS...] (see 'abox exec --help')");

  const bool tty = parsed->has("tty");
  const bool interactive = parsed->has("interactive");
  json::array env;
  bool term_given = false;
  for (const auto& e : parsed->all("env")) {
    auto entry = parse_env_assignment(e);
    if (!entry.ok()) return fail(entry.error() + " (see 'abox exec --help')");
    term_given = term_given || entry->name == "TERM";
    env.emplace_back(e);
  }
  // A terminal in the guest is the terminal here: its TERM (unless -e gave one).
  if (tty && !term_given) {
    if (const char* term = std::getenv("TERM"); term != nullptr && *term != '\0')
      env.emplace_back(std::string("TERM=") + term);
  }
  json::array argv;
  for (const auto& a : rest) argv.emplace_back(a);
  json::object fields{{"name", name}, {"args", std::move(argv)}, {"env", std::move(env)}};
  if (auto w = parsed->last("workdir")) {
    if (w->empty() || (*w)[0] != '/') return fail("--workdir " + *w + ": an absolute path in the guest");
    fields["workdir"] = *w;
  }
  if (auto u = parsed->last("user")) {
    if (!parse_user(*u)) return fail("--user " + *u + ": UID or UID:GID, numbers (see 'abox exec --help')");
    fields["user"] = *u;
  }
  const bool raw_terminal = tty && interactive && ::isatty(STDIN_FILENO) == 1;
  if (tty) {
    fields["tty"] = true;
    auto size = terminal_size(interactive ? STDIN_FILENO : STDOUT_FILENO);
    if (!size) size = terminal_size(STDOUT_FILENO);
    fields["rows"] = size ? size->rows : 24;
    fields["cols"] = size ? size->cols : 80;
  }
  if (interactive) fields["interactive"] = true;

  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) return fail(client.error());
  SignalWatch signals({SIGINT, SIGTERM, SIGHUP, SIGWINCH});
  auto exec_id = client->send("exec", std::move(fields));
  if (!exec_id.ok()) return fail(exec_id.error());
  auto first = client->next(*exec_id);
  if (!first.ok()) return fail(first.error());
  if (auto* ok = first->if_contains("ok"); ok == nullptr || !ok->is_bool() || !ok->get_bool()) {
    auto* e = first->if_contains("error");
    return fail(name + ": " + (e != nullptr && e->is_string() ? std::string(e->get_string()) : "refused"));
  }

  std::optional<TerminalMode> raw;
  if (raw_terminal) raw.emplace(STDIN_FILENO);
  bool stdin_open = interactive;
  std::uint64_t input_id = 0;  // the exec_input in flight, 0 for none
  int signals_seen = 0;
  std::vector<std::uint8_t> chunk(kMaxInputBytes);
  for (;;) {
    if (!client->buffered()) {
      pollfd fds[3] = {{client->fd(), POLLIN, 0}, {signals.fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      const bool want_stdin = stdin_open && input_id == 0;
      if (::poll(fds, want_stdin ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        return fail(std::string("poll: ") + std::strerror(errno));
      }
      if (fds[1].revents & POLLIN) {
        while (int sig = signals.next()) {
          if (sig == SIGWINCH) {
            if (!tty) continue;
            if (auto size = terminal_size(raw_terminal ? STDIN_FILENO : STDOUT_FILENO)) {
              (void)client->send(
                  "exec_resize",
                  json::object{{"exec", *exec_id}, {"rows", size->rows}, {"cols", size->cols}});
            }
            continue;
          }
          if (++signals_seen > 1) {
            raw.reset();
            std::cerr << "abox exec: " << name << ": stopped by a second signal; the command is killed\n";
            return 128 + sig;
          }
          (void)client->send("exec_signal", json::object{{"exec", *exec_id}, {"signal", sig}});
        }
        continue;
      }
      if (want_stdin && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR) continue;
        json::object in{{"exec", *exec_id}};
        if (n > 0) {
          in["data"] = base64_encode(std::span(chunk.data(), static_cast<std::size_t>(n)));
        } else {
          in["eof"] = true;
          stdin_open = false;
        }
        auto id = client->send("exec_input", std::move(in));
        if (!id.ok()) return fail(id.error());
        input_id = *id;
        continue;
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    }
    auto m = client->next_any();
    if (!m.ok()) {
      raw.reset();
      return fail(m.error());
    }
    auto* idv = m->if_contains("id");
    const std::uint64_t id = idv != nullptr && idv->is_number() ? idv->to_number<std::uint64_t>() : 0;
    if (id == input_id && input_id != 0) {
      input_id = 0;
      if (auto* ok = m->if_contains("ok"); ok == nullptr || !ok->is_bool() || !ok->get_bool())
        stdin_open = false;
      continue;
    }
    if (id != *exec_id) continue;  // the answers to resizes and signals
    if (m->if_contains("done") != nullptr) {
      raw.reset();
      if (auto* e = m->if_contains("error"); e != nullptr && e->is_string())
        std::cerr << "abox exec: " << name << ": " << e->get_string().c_str() << '\n';
      if (auto* f = m->if_contains("start_failed"); f != nullptr && f->is_object()) {
        auto* detail = f->get_object().if_contains("detail");
        std::cerr << "abox exec: " << name << ": "
                  << (detail != nullptr && detail->is_string() ? std::string(detail->get_string())
                                                               : "CMD could not start")
                  << '\n';
      }
      return exec_exit_code(*m);
    }
    for (auto [key, fd] : {std::pair{"stdout", STDOUT_FILENO}, std::pair{"stderr", STDERR_FILENO}}) {
      auto* d = m->if_contains(key);
      if (d == nullptr || !d->is_string()) continue;
      auto bytes = base64_decode(std::string_view(d->get_string()));
      if (!bytes) {
        raw.reset();
        return fail("the daemon sent output that is not base64");
      }
      // A reader of our output that went away: CMD is done for.
      if (!write_all(fd, bytes->data(), bytes->size())) {
        raw.reset();
        return fail(std::string("writing ") + key + ": " + std::strerror(errno));
      }
    }
  }
}

}  // namespace abox::engine
