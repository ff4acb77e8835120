// Tap devices in a network namespace the operator owns, for a VMM that
// needs a tap (Firecracker, cloud-hypervisor).
//
// "Owned by the operator": the namespace's user namespace was made by the
// operator's uid (NS_GET_USERNS, then NS_GET_OWNER_UID); a namespace made by
// root (`ip netns add`, the host's own) or by anyone else is refused. The
// client hands the namespace over as an fd (SCM_RIGHTS), never as a path or
// a pid the helper would have to resolve.
//
// create(): a persistent tap (IFF_TAP | IFF_NO_PI) whose owner is the
// operator, brought up. The kernel makes tun/tap devices only through
// /dev/net/tun (RTM_NEWLINK refuses the "tun" kind), so that part is the
// TUNSETIFF ioctl, with IFF_TUN_EXCL: an existing device of that name, tap
// or not, is never taken over. Bringing it up, and everything after, goes
// through libnl (libnl-route-3). When a later step fails the new tap is
// removed again.
//
// remove(): deletes the device of that name (RTM_DELLINK through libnl) when
// it is a tun/tap device; any other kind (the namespace's lo, a veth) is
// refused. Inside a namespace the operator owns, every device is theirs.
//
// Both run on a short-lived thread that enters the namespace (setns), so
// the helper's own thread never leaves the host's namespace.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.h"
#include "helper/wire.h"

namespace abox::helper {

// Whether netns_fd is a network namespace whose user namespace belongs to operator_uid.
base::Result<void, WireError> check_operator_netns(int netns_fd, uid_t operator_uid);

base::Result<void, WireError> create_tap(std::string_view tap, int netns_fd, uid_t operator_uid);
base::Result<void, WireError> remove_tap(std::string_view tap, int netns_fd, uid_t operator_uid);

}  // namespace abox::helper
