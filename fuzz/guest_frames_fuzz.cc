// Fuzz target: arbitrary Ethernet frames from a hostile guest into the whole
// guest side of abox-net (frame checks, ARP, lwIP with accept-all, the SYN
// hook and admission, UDP dispatch, the DNS gate on the gateway), through
// the Link interface. Whatever the frames, abox-net must not crash, leak or
// admit a flow that the empty AnswerTable cannot vouch for.
//
// Each input is a sequence of frames: a 2-byte big-endian length, then that
// many bytes, repeated. The length's top bit marks a frame the link says has
// trusted checksums (as a vnet header's NEEDS_CSUM would): lwIP then skips
// the TCP/UDP checksum check, so random segments reach TCP and UDP proper.
// The link offers checksum offload, so every frame lwIP sends goes through
// the stack's checksum-offload path too. The stack lives across inputs (like a long-running
// instance); lwIP's timers run between inputs. DNS questions for the one
// allowed name go to 127.0.0.1:9, where nothing answers. IPv6 flows are on,
// so a DHCPv6 message to ff02::1:2 port 547 reaches the Dhcpv6Server (seed
// ipv6_dhcpv6_information_request: one frame checksummed, one trusted).
// A frame longer than the MTU allows (1514 bytes; the length field goes to
// 32767) is dropped by the link as a real one drops it, which hands the
// stack its head (Link::last_oversize_head(): the first bytes that fit the
// buffer, and the real length), so the ICMP "packet too big" path is
// fuzzed too (seeds ipv6_too_big, ipv4_too_big_df).
// The rule allows icmp too, so echo requests to foreign addresses reach the
// echo path (guest_stack_echo.cc: parse, admission, the prohibited error;
// seeds icmp_foreign, icmp_echo_bad_checksum, ipv6_echo_foreign).
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "base/byte_reader.h"
#include "netstack/stack/guest_stack.h"
#include "policy/policy_file.h"

namespace {

using namespace abox;

class MemoryLink final : public netstack::Link {
 public:
  MemoryLink() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~MemoryLink() override { ::close(fd_); }
  int fd() const override { return fd_; }
  std::size_t mtu() const override { return 1500; }
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) override {
    // An empty frame is skipped, as a real link drops a runt and goes on:
    // returning 0 for it would mean "nothing waiting" and strand the frames
    // behind it (the queue then grew with every input).
    head_.reset();
    while (!in_.empty() && in_.front().bytes.empty()) in_.pop_front();
    if (in_.empty()) return std::size_t{0};
    auto f = std::move(in_.front().bytes);
    last_trusted_ = in_.front().checksum_trusted;
    in_.pop_front();
    std::size_t n = std::min(f.size(), buf.size());
    if (n > 0) std::memcpy(buf.data(), f.data(), n);
    if (f.size() > mtu() + 14) {  // dropped, counted, its head kept (link.h)
      ++counters_.dropped_oversize;
      head_ = netstack::OversizeHead{buf.first(n), f.size()};
      return std::size_t{0};
    }
    return n;
  }
  std::optional<netstack::OversizeHead> last_oversize_head() const override { return head_; }
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override {
    ++counters_.frames_out;
    counters_.bytes_out += frame.size();
    return {};
  }
  bool last_frame_checksum_trusted() const override { return last_trusted_; }
  bool tx_checksum_offload() const override { return true; }
  const netstack::LinkCounters& counters() const override { return counters_; }
  struct Frame {
    std::vector<std::uint8_t> bytes;
    bool checksum_trusted = false;
  };
  std::deque<Frame> in_;

 private:
  int fd_;
  bool last_trusted_ = false;
  std::optional<netstack::OversizeHead> head_;
  netstack::LinkCounters counters_;
};

struct World {
  World()
      : policy(load()),
        events(base::EventLog::discard()),
        random(1),
        stack(loop, link, policy, {policy::Endpoint{policy::IpAddress::v4(0x7F000001), 9}}, events, random,
              config()) {}
  // IPv6 neighbour discovery and flows (TCP, UDP, the DNS gate on
  // PREFIX::1) on, so that their checks and lwIP's IPv6 input are fuzzed
  // too. The seeds use link-local sources, and the instance's ULA (from the
  // SHA-256 of "fuzz") for the gate's.
  static netstack::GuestConfig config() {
    netstack::GuestConfig c;
    c.instance = "fuzz";
    c.ipv6_neighbour_discovery = true;
    c.ipv6_flows = true;
    return c;
  }
  static policy::Policy load() {
    auto p = policy::parse_policy(
        "[dns]\nupstreams = [\"127.0.0.1:9\"]\ntimeout_ms = 50\nattempts = 1\n"
        "[[allow]]\nnames = [\"example.com\"]\nports = [80, 443]\nprotocols = [\"tcp\", \"udp\", \"icmp\"]\n"
        "[limits]\nflows = 64\nhalf_open = 16\ndns_in_flight = 8\n",
        "fuzz.toml");
    if (!p.ok()) std::abort();
    return std::move(p).value();
  }
  policy::Policy policy;
  base::EventLog events;
  base::SeededRandom random;
  io::EventLoop loop;
  MemoryLink link;
  netstack::GuestStack stack;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static auto* world = new World();  // lives for the whole run, like an instance
  base::ByteReader r(std::span<const std::uint8_t>(data, size));
  for (int frames = 0; frames < 64; ++frames) {
    auto len = r.u16be();
    if (!len) break;
    const bool trusted = (*len & 0x8000) != 0;
    auto bytes = r.bytes(std::min<std::size_t>(*len & 0x7FFF, r.remaining()));
    if (!bytes) break;
    world->link.in_.push_back({std::vector<std::uint8_t>(bytes->begin(), bytes->end()), trusted});
  }
  world->stack.poll_link();
  world->loop.run_once(abox::base::Millis(0));
  // Nothing was ever answered, so nothing may have been admitted.
  if (world->stack.counters().tcp_admitted != 0 || world->stack.counters().udp_admitted != 0 ||
      world->stack.counters().echo_admitted != 0)
    __builtin_trap();
  // At most one "packet too big" per frame the link dropped as oversize.
  if (world->stack.counters().icmp_packet_too_big_sent > world->link.counters().dropped_oversize)
    __builtin_trap();
  return 0;
}
