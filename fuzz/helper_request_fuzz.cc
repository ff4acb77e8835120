// Fuzz target: helper/wire. abox-helper parses every request a client sends
// with parse_request(); the client parses the helper's replies with
// parse_reply(). The first input byte is how many fds came with the message
// (0-4), the rest is the message. Whatever the input: no crash; a request that
// parses holds only values in range and formats back to exactly the input
// bytes (so there is one spelling of each request, and nothing the parser
// accepts is lost or changed); a reply that parses formats back to a reply
// that parses the same.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "helper/wire.h"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace abox::helper;  // NOLINT(google-build-using-namespace): a test driver for this one namespace
  if (size == 0) return 0;
  const std::size_t fds = data[0] % 5;
  const std::span<const std::uint8_t> message(data + 1, size - 1);

  auto r = parse_request(message, fds);
  if (r.ok()) {
    const std::string text = format_request(*r);
    check(text.size() == message.size() &&
          std::equal(text.begin(), text.end(), message.begin(),
                     [](char a, std::uint8_t b) { return static_cast<std::uint8_t>(a) == b; }));
    check(fds_needed(*r) == fds);
    if (const auto* c = std::get_if<CgroupCreateRequest>(&*r)) {
      check(valid_instance_name(c->instance));
      check(!c->limits.memory_max ||
            (*c->limits.memory_max >= kMinMemoryMax && *c->limits.memory_max <= kMaxMemoryMax));
      check(!c->limits.pids_max || (*c->limits.pids_max >= 1 && *c->limits.pids_max <= kMaxPidsMax));
    } else if (const auto* m = std::get_if<CgroupMoveRequest>(&*r)) {
      check(valid_instance_name(m->instance) && !m->pids.empty() && m->pids.size() <= kMaxPidsPerMove);
      for (pid_t p : m->pids) check(p >= 1 && static_cast<std::uint64_t>(p) <= kMaxPid);
    } else if (const auto* t = std::get_if<TapCreateRequest>(&*r)) {
      check(valid_tap_name(t->tap));
    }
  } else {
    check(!r.error().message.empty());
  }

  auto reply = parse_reply(message);
  if (reply.ok()) {
    const std::string again = format_reply(*reply);
    check(again.size() <= kMaxMessage);
    auto back = parse_reply(
        std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(again.data()), again.size()));
    check(back.ok() && back->ok == reply->ok && back->text == reply->text &&
          (reply->ok || back->code == reply->code));
  }
  return 0;
}
