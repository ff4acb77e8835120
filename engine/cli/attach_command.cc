// `abox attach NAME` (fleet_command.h): NAME's output from now on, and this
// process's stdin to its command (an instance started with run -d -i), both
// through the daemon's API: a logs stream with from_end and follow, and
// input requests, one in flight at a time (the daemon answers once the bytes
// are in the shim's socket: that is the backpressure).
//
// An instance started with -t (inspect says "tty") and a terminal here: this
// terminal goes raw (TerminalMode: restored on every way out), its size goes
// to the instance at once and on each SIGWINCH (resize requests), and what
// is typed goes through DetachKeys: the detach sequence (Ctrl-P Ctrl-Q)
// leaves with the instance running; everything else is the command's input
// (with -i; without, it goes nowhere and Ctrl-C detaches too). SIGINT,
// SIGTERM and SIGHUP detach as well.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/object.hpp>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>

#include "engine/cli/detach_keys.h"
#include "engine/cli/exit_codes.h"
#include "engine/cli/fleet_command.h"
#include "engine/cli/options.h"
#include "engine/cli/signal_watch.h"
#include "engine/cli/terminal_mode.h"
#include "engine/daemon/api_request.h"
#include "engine/daemon/base64.h"
#include "engine/daemon/daemon_client.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

constexpr std::string_view kUsage =
    "usage: abox attach [--detach-keys KEYS] NAME\n\n"
    "Shows what NAME's command prints from now on (agent-reported, stdout and stderr\n"
    "interleaved) and sends this terminal's or pipe's input to the command's stdin when\n"
    "the instance was started with abox run -d -i.\n\n"
    "An instance started with -t (abox run -d -t -i) on a terminal here: this terminal\n"
    "goes into raw mode (restored on every way out), its size is the command's and is\n"
    "followed, and keys reach the command as typed (Ctrl-C included). Ctrl-P Ctrl-Q\n"
    "detaches and leaves the instance running (without -i, Ctrl-C detaches too).\n\n"
    "Otherwise input goes line by line; end of input (Ctrl-D) closes the command's\n"
    "stdin; Ctrl-C detaches and the instance runs on. Ends when the instance ends.\n\n"
    "Options:\n"
    "      --detach-keys KEYS   the detach sequence: comma-separated ctrl-X or single\n"
    "                           characters (default ctrl-p,ctrl-q)\n\n"
    "Exit status: 0 the instance ended, or detached; 1 no such instance, 2 usage error,\n"
    "3 the daemon could not be reached or the stream broke.\n";

constexpr OptionSpec kOptions[] = {{"detach-keys", 0, true}};

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

// The main command's window: this terminal's. The request's id, 0 when none went.
std::uint64_t send_size(DaemonClient& client, const std::string& name) {
  auto size = terminal_size(STDIN_FILENO);
  if (!size) return 0;
  auto id = client.send("resize", json::object{{"name", name}, {"rows", size->rows}, {"cols", size->cols}});
  return id.ok() ? *id : 0;
}

int attach_terminal(DaemonClient& client, const std::string& name, bool interactive,
                    std::vector<std::uint8_t> keys) {
  auto logs = client.send("logs", json::object{{"name", name}, {"follow", true}, {"from_end", true}});
  if (!logs.ok()) {
    std::cerr << "abox attach: " << logs.error() << '\n';
    return kExitFailed;
  }
  auto first = client.next(*logs);
  if (!first.ok() || !first->at("ok").as_bool()) {
    std::cerr << "abox attach: " << name << ": "
              << (first.ok() ? std::string(first->at("error").as_string()) : first.error()) << '\n';
    return first.ok() ? kExitNo : kExitFailed;
  }
  std::cerr << "abox attach: " << name << ": its terminal (agent-reported); " << kDefaultDetachKeys
            << " or your --detach-keys detach"
            << (interactive ? "" : "; it takes no input (no -i): Ctrl-C detaches too") << '\n';
  SignalWatch signals({SIGINT, SIGTERM, SIGHUP, SIGWINCH});
  std::optional<TerminalMode> raw(std::in_place, STDIN_FILENO);
  auto leave = [&](std::string_view why, int code) {
    raw.reset();
    std::cerr << "\r\nabox attach: " << why << '\n';
    return code;
  };
  std::uint64_t resize_id = send_size(client, name);  // its answer, if an error, is said once
  bool resize_failed = false;
  DetachKeys detach(std::move(keys));
  std::vector<std::uint8_t> typed(4096), forward, pending;
  bool stdin_open = true;
  std::uint64_t input_id = 0;  // the input request in flight, 0 for none
  for (;;) {
    // What was typed and not yet sent goes first, one input request at a time.
    if (interactive && input_id == 0 && !pending.empty()) {
      std::size_t n = std::min(pending.size(), kMaxInputBytes);
      auto id = client.send(
          "input", json::object{{"name", name}, {"data", base64_encode(std::span(pending.data(), n))}});
      if (!id.ok()) return leave(id.error(), kExitFailed);
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
      input_id = *id;
    }
    if (!client.buffered()) {
      pollfd fds[3] = {{client.fd(), POLLIN, 0}, {signals.fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      // Read the terminal while what it gave is on its way (bounded: one read's worth held).
      const bool want_stdin = stdin_open && pending.size() < kMaxInputBytes;
      if (::poll(fds, want_stdin ? 3 : 2, -1) < 0) {
        if (errno == EINTR) continue;
        return leave(std::string("poll: ") + std::strerror(errno), kExitFailed);
      }
      if (fds[1].revents & POLLIN) {
        while (int sig = signals.next()) {
          if (sig == SIGWINCH) {
            resize_id = send_size(client, name);
            continue;
          }
          return leave("detached from " + name + " (a signal); it runs on", kExitOk);
        }
        continue;
      }
      if (want_stdin && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = ::read(STDIN_FILENO, typed.data(), typed.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          stdin_open = false;
          continue;
        }
        forward.clear();
        const bool detached = detach.feed(std::span(typed.data(), static_cast<std::size_t>(n)), forward);
        if (!interactive && !detached &&
            std::find(forward.begin(), forward.end(), std::uint8_t{0x03}) != forward.end())
          return leave("detached from " + name + " (Ctrl-C; it takes no input); it runs on", kExitOk);
        if (interactive) pending.insert(pending.end(), forward.begin(), forward.end());
        if (detached) return leave("detached from " + name + "; it runs on", kExitOk);
        continue;
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    }
    auto m = client.next_any();
    if (!m.ok()) return leave(m.error(), kExitFailed);
    auto id = m->at("id").to_number<std::uint64_t>();
    if (id == input_id && input_id != 0) {
      input_id = 0;
      if (!m->at("ok").as_bool()) {
        std::string why(m->at("error").as_string());
        raw.reset();
        std::cerr << "\r\nabox attach: input not sent: " << why << '\n';
        raw.emplace(STDIN_FILENO);
        interactive = false;
        pending.clear();
      }
    } else if (id == *logs) {
      if (m->if_contains("done") != nullptr) return leave(name + " ended", kExitOk);
      if (auto* d = m->if_contains("data"); d != nullptr && d->is_string()) {
        auto bytes = base64_decode(std::string_view(d->get_string()));
        if (!bytes || !write_all(STDOUT_FILENO, bytes->data(), bytes->size()))
          return leave("output", kExitFailed);
      }
    } else if (id == resize_id && resize_id != 0 && !m->at("ok").as_bool() && !resize_failed) {
      // The command's window does not follow this terminal's: said once (raw mode: \r\n).
      resize_failed = true;
      std::cerr << "abox attach: the terminal's size did not reach " << name << ": "
                << m->at("error").as_string().c_str() << "\r\n";
    }
    // Other ids: the answers to earlier resize requests.
  }
}

}  // namespace

int run_attach_command(std::span<const std::string_view> args) {
  auto parsed = parse_options(args, kOptions, false);
  if (!parsed.ok() || (!parsed->help && parsed->positionals.size() != 1)) {
    std::cerr << "abox attach: " << (parsed.ok() ? "give one NAME" : parsed.error())
              << " (see 'abox attach --help')\n";
    return kExitUsage;
  }
  if (parsed->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  const std::string& name = parsed->positionals[0];
  auto keys = parse_detach_keys(parsed->last("detach-keys").value_or(std::string(kDefaultDetachKeys)));
  if (!keys) {
    std::cerr << "abox attach: --detach-keys: comma-separated ctrl-X or single characters, like "
              << kDefaultDetachKeys << " (see 'abox attach --help')\n";
    return kExitUsage;
  }
  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) {
    std::cerr << "abox attach: " << client.error() << '\n';
    return kExitFailed;
  }
  // -t and -i of the instance's own abox run -d: a terminal to share, and input to send.
  auto info = client->call("inspect", json::object{{"name", name}});
  if (!info.ok()) {
    std::cerr << "abox attach: " << name << ": " << info.error() << '\n';
    return info.error().rfind("no instance", 0) == 0 ? kExitNo : kExitFailed;
  }
  const auto& instance = info->at("instance").as_object();
  auto bool_of = [&](std::string_view key) {
    auto* v = instance.if_contains(key);
    return v != nullptr && v->is_bool() && v->get_bool();
  };
  if (bool_of("tty") && ::isatty(STDIN_FILENO) == 1)
    return attach_terminal(*client, name, bool_of("interactive"), std::move(*keys));
  auto logs = client->send("logs", json::object{{"name", name}, {"follow", true}, {"from_end", true}});
  if (!logs.ok()) {
    std::cerr << "abox attach: " << logs.error() << '\n';
    return kExitFailed;
  }
  auto first = client->next(*logs);
  if (!first.ok() || !first->at("ok").as_bool()) {
    std::cerr << "abox attach: " << name << ": "
              << (first.ok() ? std::string(first->at("error").as_string()) : first.error()) << '\n';
    return first.ok() ? kExitNo : kExitFailed;
  }
  std::cerr << "abox attach: " << name << ": agent-reported output follows (Ctrl-C detaches)\n";
  bool stdin_open = true;
  std::uint64_t input_id = 0;  // the input request in flight, 0 for none
  std::vector<std::uint8_t> chunk(kMaxInputBytes / 4);
  for (;;) {
    if (!client->buffered()) {
      pollfd fds[2] = {{client->fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      bool want_stdin = stdin_open && input_id == 0;
      if (::poll(fds, want_stdin ? 2 : 1, -1) < 0) {
        if (errno == EINTR) continue;
        return kExitFailed;
      }
      if (want_stdin && (fds[1].revents & (POLLIN | POLLHUP)) != 0) {
        ssize_t n = ::read(STDIN_FILENO, chunk.data(), chunk.size());
        if (n < 0 && errno == EINTR) continue;
        json::object fields{{"name", name}};
        if (n > 0) {
          fields["data"] = base64_encode(std::span(chunk.data(), static_cast<std::size_t>(n)));
        } else {
          fields["eof"] = true;
          stdin_open = false;
        }
        auto id = client->send("input", std::move(fields));
        if (!id.ok()) return kExitFailed;
        input_id = *id;
        continue;
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    }
    auto m = client->next_any();
    if (!m.ok()) {
      std::cerr << "abox attach: " << m.error() << '\n';
      return kExitFailed;
    }
    auto id = m->at("id").to_number<std::uint64_t>();
    if (id == input_id) {
      input_id = 0;
      if (!m->at("ok").as_bool()) {
        std::cerr << "abox attach: input not sent: " << m->at("error").as_string().c_str() << '\n';
        stdin_open = false;
      }
    } else if (id == *logs) {
      if (m->if_contains("done") != nullptr) return kExitOk;
      if (auto* d = m->if_contains("data"); d != nullptr && d->is_string()) {
        auto bytes = base64_decode(std::string_view(d->get_string()));
        if (!bytes || !write_all(STDOUT_FILENO, bytes->data(), bytes->size())) return kExitFailed;
      }
    }
  }
}

}  // namespace abox::engine
