// The host's parser of guest-controlled bytes on the control channel
// (guest/protocol/): what box-guest, or a guest kernel that owns the port,
// sends to the supervisor.
//
// The first byte picks what the rest is:
//   even: a byte stream into a keyed FrameReader, in reads of varying size
//         (taken from the input); nothing may be delivered that does not
//         verify, and the reader never holds more than kMaxFrameBytes;
//   odd:  one payload of a message type (byte 2: below 128 a guest-to-host
//         type, what the supervisor decodes; from 128 the host-to-guest type
//         byte-128, what box-guest decodes), through its decoder; what
//         decodes must encode back to the same bytes (one payload, one reading).
// Version 3's command sessions are in both: every session-tagged message
// (started, start_failed, stdout, stderr, exited, stdin_credit; exec, stdin,
// stdin_eof, output_credit, signal, resize), and a session's data never
// holds more than kMaxStreamBytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "guest/protocol/frame.h"
#include "guest/protocol/messages.h"

namespace {

using namespace abox::guest;

template <class M>
void round_trip(const std::optional<M>& m, std::span<const std::uint8_t> payload) {
  if (!m) return;
  std::vector<std::uint8_t> again;
  encode(*m, again);
  if (again.size() != payload.size() || !std::equal(again.begin(), again.end(), payload.begin()))
    std::abort();
}

// stdout, stderr, stdin: a session, then bytes that fit one frame.
void session_data(std::span<const std::uint8_t> p) {
  auto d = decode_session_data(p);
  if (!d) {
    if (p.size() >= kSessionIdBytes) std::abort();  // anything with an id decodes
    return;
  }
  if (d->bytes.size() != p.size() - kSessionIdBytes) std::abort();
  if (p.size() <= kMaxPayload && d->bytes.size() > kMaxStreamBytes) std::abort();
  round_trip(d, p);
}

// What box-guest decodes from the host (a host is trusted, but its decoder
// runs on whatever reaches the port, and must never read out of bounds).
// copy_data and the empty messages carry no structure to decode.
void decode_host_payload(std::uint8_t type, std::span<const std::uint8_t> p) {
  switch (static_cast<HostMessage>(type)) {
    case HostMessage::kOutputCredit:
      round_trip(decode_session_credit(p), p);
      break;
    case HostMessage::kSignal:
      round_trip(decode_signal(p), p);
      break;
    case HostMessage::kResize:
      round_trip(decode_resize(p), p);
      break;
    case HostMessage::kExec: {
      auto e = decode_exec(p);
      if (e && (e->session == kMainSession || e->argv.empty() || e->env.size() > kMaxEnvEntries))
        std::abort();
      round_trip(e, p);
      break;
    }
    case HostMessage::kStdin:
      session_data(p);
      break;
    case HostMessage::kStdinEof:
      round_trip(decode_session_ref(p), p);
      break;
    case HostMessage::kSetup: {
      auto s = decode_setup(p);
      if (s && peek_setup_version(p) != s->version) std::abort();
      round_trip(s, p);
      break;
    }
    case HostMessage::kCopyIn:
    case HostMessage::kCopyOut:
      round_trip(decode_copy_path(p), p);
      break;
    case HostMessage::kCopyCredit:
      round_trip(decode_credit(p), p);
      break;
    default:
      (void)decode_empty(p);
      break;
  }
}

void decode_payload(std::uint8_t type, std::span<const std::uint8_t> p) {
  switch (static_cast<GuestMessage>(type)) {
    case GuestMessage::kHello:
      round_trip(decode_hello(p), p);
      break;
    case GuestMessage::kSelftestReport:
      round_trip(decode_selftest_report(p), p);
      break;
    case GuestMessage::kStarted:
      round_trip(decode_started(p), p);
      break;
    case GuestMessage::kStartFailed:
      round_trip(decode_start_failed(p), p);
      break;
    case GuestMessage::kExited:
      round_trip(decode_exited(p), p);
      break;
    case GuestMessage::kLog:
      round_trip(decode_log(p), p);
      break;
    case GuestMessage::kStdinCredit:
      round_trip(decode_session_credit(p), p);
      break;
    case GuestMessage::kStdout:
    case GuestMessage::kStderr:
      session_data(p);
      break;
    case GuestMessage::kCopyInDone:
    case GuestMessage::kCopyOutDone:
      round_trip(decode_copy_result(p), p);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::span<const std::uint8_t> in(data, size);
  if (in[0] % 2 == 1) {
    if (in[1] >= 128) {
      decode_host_payload(static_cast<std::uint8_t>(in[1] - 128), in.subspan(2));
    } else {
      decode_payload(in[1], in.subspan(2));
    }
    return 0;
  }
  FrameReader reader(Direction::kGuestToHost);
  ChannelKey key{};
  key.fill(0x5a);
  if (in[1] & 1) reader.set_key(key);
  std::size_t step = 1 + in[1] / 2;
  std::size_t at = 2;
  for (int rounds = 0; rounds < 100000; ++rounds) {
    for (int frames = 0; frames < 100000; ++frames) {
      auto f = reader.next();
      if (!f.ok()) {
        if (f.error() == FrameError::kLengthTooLarge || f.error() == FrameError::kLengthTooSmall) return 0;
        continue;
      }
      if (!*f) break;
      // A keyed reader cannot deliver a frame the fuzzer forged without the key
      // (and the corpus never holds one), so a delivered frame here is unkeyed.
      if (reader.keyed()) std::abort();
      decode_payload((*f)->type, (*f)->payload);
    }
    if (reader.buffered() > kMaxFrameBytes) std::abort();
    if (at >= size) break;
    auto space = reader.space();
    std::size_t n = std::min({step, space.size(), size - at});
    std::memcpy(space.data(), data + at, n);
    reader.commit(n);
    at += n;
  }
  return 0;
}
