// TapLink: the guest link of a network-namespace guest, as pasta does it.
// abox-net runs outside the guest's network namespace and owns a tap device
// inside it: the guest's eth0. Frames the guest's kernel sends out of eth0
// are read from the tap fd; frames written to the fd arrive on eth0.
//
// Setting up (create_in_netns): the calling thread enters the namespace just
// long enough to open /dev/net/tun, create the tap (TUNSETIFF) and open an
// rtnetlink socket there, then returns to its own namespace. Through that
// socket (rtnetlink.h) it sets the MTU, brings lo and the tap up, adds the
// guest's address and a default route via the gateway. Both fds keep working
// from any namespace. The tap is not persistent: closing the fd (destroying
// the TapLink) removes eth0 from the namespace.
//
// Life of one frame: receive() reads exactly one frame per read (the tap
// keeps frame boundaries). The buffer gets mtu() + 14 bytes and a scratch
// iovec (the spill, 64 KiB, never touched by a frame that fits) takes the
// rest, so a frame longer than the MTU allows shows as a read that spilled:
// it is dropped and counted, never delivered truncated, and its head (in
// the buffer) and real length (the read's) go to last_oversize_head(). send_frame() writes one frame per
// writev, its pieces as they are.
//
// The vnet header (create_in_netns only): the tap is IFF_VNET_HDR with
// checksum offload (TUN_F_CSUM), so every frame either way carries a
// virtio_net_hdr in its own iovec ahead of it. Frames from the guest may
// carry partial TCP/UDP checksums (NEEDS_CSUM); last_frame_checksum_trusted()
// tells the stack to skip checking those. Frames to the guest may leave the
// checksum to the guest's kernel (OutFrame's checksum fields). TSO4 and
// TSO6 are offered too: the guest's kernel may hand over one TCP segment,
// IPv4 or IPv6, of up to 65535 bytes (max_receive_size()) whatever the MTU;
// other GSO types are dropped as oversize. The other way, a TCP frame of
// either family of up to 65535 bytes goes to the guest as one GSO packet
// (OutFrame's gso_size, gso_tcp_ipv6): the guest's kernel takes it whole,
// as if its driver had coalesced (GRO) the segments.
//
// Limits: frames up to mtu() + 14 bytes each way. A tap from from_fd() has
// no vnet header (IFF_TAP | IFF_NO_PI) and no offloads.
//
// When the guest goes away:
//  - The tap device is deleted (someone ran `ip link del eth0`): receive()
//    and send() return EBADFD, the fd polls POLLERR. The link is dead.
//  - The namespace is deleted (`ip netns del`, or the process whose
//    /proc/PID/ns/net was given exits): nothing happens to the tap fd. The
//    kernel keeps a namespace alive while a tap created in it is open, so
//    the tap never notices. netns_alive() checks instead whether the path
//    abox-net was given still names the same namespace (the same inode),
//    and for a /proc/PID/ns/net path whether that process still runs (a
//    pidfd taken at creation: a reused PID does not count, and it works
//    after the capabilities are dropped, when /proc/PID/ns may not be
//    ours to stat); abox-net calls it from a timer (about once a second,
//    as pasta does) and stops when it turns false.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "netstack/link/link.h"
#include "policy/ip_address.h"

namespace abox::netstack {

// The guest's side of the network, as abox-net sets it up in the namespace.
// The defaults are those of QEMU's user networking (and pasta's habit):
// guest 10.0.2.15/24, gateway 10.0.2.2, MTU 65520 (the largest frame lwIP's
// u16 pbuf lengths carry: 65520 + 14 <= 65535), interface eth0.
struct GuestNetConfig {
  policy::IpAddress guest_address = policy::IpAddress::v4(0x0A00'020F);  // 10.0.2.15
  unsigned prefix_len = 24;
  // Must lie inside guest_address/prefix_len (it is the on-link next hop).
  policy::IpAddress gateway = policy::IpAddress::v4(0x0A00'0202);  // 10.0.2.2
  // IP MTU of eth0, 68..65521 (the tap's own limit; 1280 or more for IPv6).
  std::size_t mtu = 65520;
  // Name of the tap in the namespace; no interface of that name may exist.
  std::string ifname = "eth0";
  // The MAC address abox-net answers ARP with for the gateway (and for every
  // other address it stands in for). The link itself does not use it: it is
  // here so that the whole guest network is described in one place.
  // 52:55:0a:00:02:02 is QEMU's: locally administered, unicast.
  std::array<std::uint8_t, 6> gateway_mac = {0x52, 0x55, 0x0a, 0x00, 0x02, 0x02};
  // eth0's own MAC address; unset leaves the kernel's random one.
  std::optional<std::array<std::uint8_t, 6>> guest_mac;
};

class TapLink final : public Link {
 public:
  static constexpr std::size_t kEthernetHeader = 14;

  // Creates the tap `config.ifname` inside `netns` and configures it (see
  // the top of this file). `netns` is a name under /run/netns (as `ip netns`
  // makes) or a path such as /proc/PID/ns/net (anything with a '/').
  // The calling thread's own namespace is restored before returning, on
  // success and failure alike. Errors name the step and the errno text, e.g.
  // "cannot enter network namespace /run/netns/x: No such file or directory".
  // Needs CAP_SYS_ADMIN (setns) and CAP_NET_ADMIN over that namespace.
  static base::Result<std::unique_ptr<TapLink>, std::string> create_in_netns(std::string_view netns,
                                                                             const GuestNetConfig& config);

  // Wraps a tap someone else opened and configured (abox-net --tap-fd N).
  // Takes ownership of fd (it is closed on failure too), checks that it is
  // an attached tap without vnet header (TUNGETIFF), and makes it
  // non-blocking. `mtu` is the IP MTU the link enforces. The tap must have
  // been opened with IFF_NO_PI: TUNGETIFF cannot tell (see from_fd()).
  // netns_alive() is always true for such a link: there is no path to watch.
  static base::Result<std::unique_ptr<TapLink>, std::string> from_fd(base::UniqueFd&& fd, std::size_t mtu);

  TapLink(const TapLink&) = delete;
  TapLink& operator=(const TapLink&) = delete;
  ~TapLink() override = default;

  // Link
  int fd() const override { return fd_.get(); }
  std::size_t mtu() const override { return mtu_; }
  // One frame, checked only for its length: a frame longer than
  // max_frame_size() or longer than buf is dropped and counted in
  // dropped_oversize (pass a buffer of max_frame_size() bytes); one shorter
  // than an Ethernet header is dropped and counted in dropped_runt(). Drops
  // do not end the call: it goes on to the next frame until one is
  // delivered or the tap is empty, so 0 means "nothing waiting", but for a
  // frame over the MTU (not a GSO packet): the call ends there and
  // last_oversize_head() gives its head (link.h), min(its length, buf) bytes.
  base::Result<std::size_t, int> receive(std::span<std::uint8_t> buf) override;
  // The same frame checks for a read the ring made (see link.h); a tap that
  // is gone completes the read with EBADFD, which is returned.
  std::span<const iovec> ring_receive_iovecs(std::span<std::uint8_t> buf) override;
  base::Result<std::size_t, int> finish_ring_receive(int res) override;
  // A frame longer than max_frame_size() is dropped (dropped_oversize); one
  // shorter than an Ethernet header or refused by the kernel (EINVAL) is
  // dropped (dropped_send). Both return EMSGSIZE: the link is still fine.
  // EAGAIN is counted in dropped_send and returned.
  base::Result<void, int> send(std::span<const std::uint8_t> frame) override;
  // The same checks and results as send(), for a frame in pieces.
  base::Result<void, int> send_frame(const OutFrame& frame) override;
  // Ring writes (link.h): the vnet header (10 bytes), or none for a tap
  // from from_fd(); the same checks and counting as send_frame().
  bool ring_send_supported() const override { return true; }
  std::optional<std::size_t> ring_send_header(const OutFrame& frame,
                                              std::span<std::uint8_t, kRingSendHeaderMax> header) override;
  base::Result<void, int> finish_ring_send(int res, std::size_t frame_size) override;
  bool last_frame_checksum_trusted() const override { return last_checksum_trusted_; }
  std::optional<OversizeHead> last_oversize_head() const override { return oversize_head_; }
  // A tap reads one frame per read: nothing is ever buffered, but the call
  // clears the last head, as every receive call does (link.h).
  base::Result<std::size_t, int> receive_buffered(std::span<std::uint8_t> /*buf*/) override {
    oversize_head_.reset();
    return std::size_t{0};
  }
  bool tx_checksum_offload() const override { return vnet_; }
  bool tx_tso() const override { return vnet_; }
  // 65535 with the vnet header (TSO frames), else max_frame_size().
  std::size_t max_receive_size() const override;
  const LinkCounters& counters() const override { return counters_; }

  // mtu() plus the Ethernet header: the largest frame either way.
  std::size_t max_frame_size() const { return mtu_ + kEthernetHeader; }
  // Frames from the guest shorter than an Ethernet header.
  std::uint64_t dropped_runt() const { return dropped_runt_; }
  // The tap's name (as the kernel reported it).
  const std::string& ifname() const { return ifname_; }
  // The namespace path the link was created in; empty for from_fd().
  const std::string& netns_path() const { return netns_path_; }
  // False once netns_path() is gone or names another namespace than the one
  // the tap was created in (one stat(); see the top of this file).
  bool netns_alive() const;

 private:
  TapLink(base::UniqueFd fd, std::size_t mtu, std::string ifname);
  // What a read of n bytes (vnet header included) into `frame`, with `room`
  // for it, delivered: its length, or 0 when it was dropped and counted
  // (and oversize_head_ set for a frame over the MTU).
  std::size_t accept_read(std::size_t n, const std::uint8_t* frame, std::size_t room,
                          const std::uint8_t* vnet_header);
  // send_frame()'s checks; false: dropped and counted. Fills the vnet header.
  bool prepare_send(const OutFrame& frame, std::uint8_t* vnet_header);
  // Counts a write's result (bytes, or -errno) as send_frame() returns it.
  base::Result<void, int> count_send(long res, std::size_t size);

  base::UniqueFd fd_;
  std::size_t mtu_;
  std::string ifname_;
  std::string netns_path_;
  dev_t netns_dev_ = 0;
  ino_t netns_ino_ = 0;
  base::UniqueFd netns_owner_;  // pidfd of the process a /proc/PID/ns/net path names
  LinkCounters counters_;
  std::uint64_t dropped_runt_ = 0;
  bool vnet_ = false;  // frames carry a virtio_net_hdr; checksum offload on
  bool last_checksum_trusted_ = false;
  std::optional<OversizeHead> oversize_head_;  // the last receive call's (link.h)
  // The spill of every read, receive()'s and the ring's (one at a time):
  // where the rest of a frame longer than the buffer goes, so that the read
  // says its real length. Not initialised: its pages are touched only by
  // oversize frames.
  static constexpr std::size_t kSpillBytes = 65536;
  std::unique_ptr<std::uint8_t[]> spill_ = std::make_unique_for_overwrite<std::uint8_t[]>(kSpillBytes);
  // The ring read's own storage (ring_receive_iovecs()): vnet header, the
  // iovecs, the frame's room.
  std::array<std::uint8_t, 10> ring_vnet_{};
  std::array<iovec, 3> ring_iov_{};
  std::size_t ring_room_ = 0;
  const std::uint8_t* ring_frame_ = nullptr;
  std::vector<std::uint8_t> gather_;  // send_frame() with more pieces than one writev takes
};

}  // namespace abox::netstack
