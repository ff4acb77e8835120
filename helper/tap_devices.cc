#include "helper/tap_devices.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "base/unique_fd.h"

namespace abox::helper {

namespace {

base::Err<WireError> fail(ErrorCode code, std::string message) {
  return base::Err{WireError{code, std::move(message)}};
}

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
struct LinkDeleter {
  void operator()(rtnl_link* l) const { rtnl_link_put(l); }
};
using NlSock = std::unique_ptr<nl_sock, SockDeleter>;
using Link = std::unique_ptr<rtnl_link, LinkDeleter>;

// A route socket in the calling thread's network namespace.
base::Result<NlSock, WireError> route_socket() {
  NlSock sock(nl_socket_alloc());
  if (!sock) return fail(ErrorCode::kSystem, "nl_socket_alloc failed");
  if (int err = nl_connect(sock.get(), NETLINK_ROUTE); err < 0) {
    return fail(ErrorCode::kSystem, std::string("netlink: ") + nl_geterror(err));
  }
  return sock;
}

// The device called tap, or not-found.
base::Result<Link, WireError> find_link(nl_sock* sock, const std::string& tap) {
  rtnl_link* raw = nullptr;
  int err = rtnl_link_get_kernel(sock, 0, tap.c_str(), &raw);
  if (err < 0) {
    if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NODEV) {
      return fail(ErrorCode::kNotFound, "no device '" + tap + "' in that network namespace");
    }
    return fail(ErrorCode::kSystem, "netlink: looking up '" + tap + "': " + nl_geterror(err));
  }
  return Link(raw);
}

// Runs work on a thread of its own inside the namespace netns_fd.
template <class Work>
base::Result<void, WireError> in_netns(int netns_fd, Work&& work) {
  std::optional<base::Result<void, WireError>> result;
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      result =
          fail(ErrorCode::kSystem, std::string("entering the network namespace: ") + std::strerror(errno));
      return;
    }
    result = work();
  });
  t.join();
  return std::move(*result);
}

}  // namespace

base::Result<void, WireError> check_operator_netns(int netns_fd, uid_t operator_uid) {
  const int type = ::ioctl(netns_fd, NS_GET_NSTYPE);
  if (type < 0)
    return fail(ErrorCode::kBadField,
                "the fd is not a namespace (" + std::string(std::strerror(errno)) + ")");
  if (type != CLONE_NEWNET)
    return fail(ErrorCode::kBadField, "the fd is a namespace, but not a network namespace");
  base::UniqueFd userns(::ioctl(netns_fd, NS_GET_USERNS));
  if (!userns) {
    return fail(ErrorCode::kNotPermitted,
                std::string("cannot see the network namespace's user namespace: ") + std::strerror(errno));
  }
  uid_t owner = 0;
  if (::ioctl(userns.get(), NS_GET_OWNER_UID, &owner) != 0) {
    return fail(ErrorCode::kSystem, std::string("NS_GET_OWNER_UID: ") + std::strerror(errno));
  }
  if (owner != operator_uid) {
    return fail(ErrorCode::kNotPermitted, "the network namespace belongs to uid " + std::to_string(owner) +
                                              ", not to the operator (uid " + std::to_string(operator_uid) +
                                              "): make it in a user namespace of your own");
  }
  return {};
}

base::Result<void, WireError> create_tap(std::string_view tap_view, int netns_fd, uid_t operator_uid) {
  if (auto ok = check_tap_name(tap_view); !ok.ok()) return base::Err{ok.error()};
  if (auto ok = check_operator_netns(netns_fd, operator_uid); !ok.ok()) return base::Err{ok.error()};
  const std::string tap(tap_view);
  return in_netns(netns_fd, [&]() -> base::Result<void, WireError> {
    base::UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    if (!tun) return fail(ErrorCode::kSystem, std::string("/dev/net/tun: ") + std::strerror(errno));
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, tap.data(), tap.size());
    ifr.ifr_flags = static_cast<short>(static_cast<unsigned short>(IFF_TAP | IFF_NO_PI | IFF_TUN_EXCL));
    if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) {
      if (errno == EBUSY || errno == EEXIST) {
        return fail(ErrorCode::kExists, "a device '" + tap + "' already exists in that network namespace");
      }
      return fail(ErrorCode::kSystem, "TUNSETIFF '" + tap + "': " + std::strerror(errno));
    }
    // Until it is persistent, closing `tun` removes the device: an error
    // before that point leaves nothing behind.
    if (::ioctl(tun.get(), TUNSETOWNER, static_cast<unsigned long>(operator_uid)) != 0) {
      return fail(ErrorCode::kSystem, std::string("TUNSETOWNER: ") + std::strerror(errno));
    }
    if (::ioctl(tun.get(), TUNSETPERSIST, 1UL) != 0) {
      return fail(ErrorCode::kSystem, std::string("TUNSETPERSIST: ") + std::strerror(errno));
    }
    auto undo = [&](WireError e) -> base::Result<void, WireError> {
      [[maybe_unused]] int rc = ::ioctl(tun.get(), TUNSETPERSIST, 0UL);
      e.message += " (the tap was removed again)";
      return base::Err{std::move(e)};
    };
    auto sock = route_socket();
    if (!sock.ok()) return undo(sock.error());
    auto link = find_link(sock->get(), tap);
    if (!link.ok()) return undo(link.error());
    Link change(rtnl_link_alloc());
    if (!change) return undo(WireError{ErrorCode::kSystem, "rtnl_link_alloc failed"});
    rtnl_link_set_flags(change.get(), IFF_UP);
    if (int err = rtnl_link_change(sock->get(), link->get(), change.get(), 0); err < 0) {
      return undo(WireError{ErrorCode::kSystem, "netlink: bringing '" + tap + "' up: " + nl_geterror(err)});
    }
    return {};
  });
}

base::Result<void, WireError> remove_tap(std::string_view tap_view, int netns_fd, uid_t operator_uid) {
  if (auto ok = check_tap_name(tap_view); !ok.ok()) return base::Err{ok.error()};
  if (auto ok = check_operator_netns(netns_fd, operator_uid); !ok.ok()) return base::Err{ok.error()};
  const std::string tap(tap_view);
  return in_netns(netns_fd, [&]() -> base::Result<void, WireError> {
    auto sock = route_socket();
    if (!sock.ok()) return base::Err{sock.error()};
    auto link = find_link(sock->get(), tap);
    if (!link.ok()) return base::Err{link.error()};
    const char* kind = rtnl_link_get_type(link->get());
    if (kind == nullptr || std::strcmp(kind, "tun") != 0) {
      return fail(ErrorCode::kNotPermitted, "'" + tap + "' is not a tap (its kind is " +
                                                (kind != nullptr ? std::string(kind) : std::string("none")) +
                                                ")");
    }
    if (int err = rtnl_link_delete(sock->get(), link->get()); err < 0) {
      return fail(ErrorCode::kSystem, "netlink: deleting '" + tap + "': " + nl_geterror(err));
    }
    return {};
  });
}

}  // namespace abox::helper
