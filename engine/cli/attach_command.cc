// `abox attach NAME` (fleet_command.h): NAME's output from now on, and this
// process's stdin to its command (an instance started with run -d -i), both
// through the daemon's API: a logs stream with from_end and follow, and
// input requests, one in flight at a time (the daemon answers once the bytes
// are in the shim's socket: that is the backpressure).
#include <poll.h>
#include <unistd.h>

#include <boost/json/object.hpp>
#include <iostream>

#include "engine/cli/exit_codes.h"
#include "engine/cli/fleet_command.h"
#include "engine/cli/options.h"
#include "engine/daemon/api_request.h"
#include "engine/daemon/base64.h"
#include "engine/daemon/daemon_client.h"

namespace abox::engine {

namespace json = boost::json;

namespace {

constexpr std::string_view kUsage =
    "usage: abox attach NAME\n\n"
    "Shows what NAME's command prints from now on (agent-reported, stdout and stderr\n"
    "interleaved) and sends this terminal's or pipe's input to the command's stdin when\n"
    "the instance was started with abox run -d -i (line by line on a terminal: it is not\n"
    "put in raw mode, and there is no -t for detached instances). End of input (Ctrl-D)\n"
    "closes the command's stdin; Ctrl-C detaches and the instance runs on. Ends when the\n"
    "instance ends.\n\n"
    "Exit status: 0 the instance ended, 1 no such instance, 2 usage error, 3 the daemon\n"
    "could not be reached or the stream broke.\n";

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

int run_attach_command(std::span<const std::string_view> args) {
  auto parsed = parse_options(args, std::span<const OptionSpec>(), false);
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
  auto client = DaemonClient::connect(/*autostart=*/true, std::cerr);
  if (!client.ok()) {
    std::cerr << "abox attach: " << client.error() << '\n';
    return kExitFailed;
  }
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
