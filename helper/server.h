// HelperServer: abox-helper's socket and its one loop.
//
// The socket is AF_UNIX SOCK_SEQPACKET at config.socket_path, mode 0660,
// owner root, group config.operator_gid: the operator's group may connect,
// nobody else. It is made under a temporary name and renamed into place once
// it listens with that mode, so a client that sees it can use it. A stale
// socket file is replaced; a live one (another helper answers on it) is an
// error. Every accepted peer is checked with
// SO_PEERCRED: a uid other than config.operator_uid (root included) gets
// one `error not-permitted` reply and is disconnected before it can send
// anything. At most kMaxClients connections are open at once; one more is
// answered `error limit` and closed.
//
// Each message is read whole (recvmsg with room for kMaxMessage + 1 bytes
// and kMaxFds fds, close-on-exec): a longer message, a truncated fd list,
// or a request with the wrong number of fds is refused, and every fd that
// came with a refused request is closed. Only a request that parse_request()
// accepted reaches CgroupTree or the tap functions; the reply says ok or the
// error, and one line per request goes to the log (stderr: the journal).
// The loop is poll(2) on the listener, the clients and a signalfd; SIGTERM
// or SIGINT ends it, removes the socket file (when it is still ours) and the
// cgroup root (when it is empty). No client can make the loop block: replies
// are sent with MSG_DONTWAIT, and a client that does not read its replies
// is disconnected.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "helper/cgroup_tree.h"
#include "helper/wire.h"

namespace abox::helper {

inline constexpr std::size_t kMaxClients = 16;
inline constexpr std::size_t kMaxFds = 4;

struct HelperConfig {
  uid_t operator_uid = 0;
  gid_t operator_gid = 0;
  std::string socket_path;
  std::string cgroup_root;  // "" for no cgroup operations
};

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class HelperServer {
 public:
  // Binds the socket and opens the cgroup root (a root that cannot be used
  // is logged and leaves cgroup operations unavailable; the taps still work).
  static base::Result<std::unique_ptr<HelperServer>, std::string> create(HelperConfig config);
  ~HelperServer();

  // Serves until SIGTERM or SIGINT.
  void run();

  // One request from an operator's peer, fds as they came (for tests of the dispatch).
  Reply handle(const Request& request, std::vector<base::UniqueFd>& fds);

  const std::string& cgroup_problem() const { return cgroup_problem_; }

 private:
  struct Client {
    base::UniqueFd fd;
    Peer peer;
  };
  explicit HelperServer(HelperConfig config) : config_(std::move(config)) {}
  void accept_clients();
  // false when the client is to be dropped.
  bool serve_one(Client& client);

  HelperConfig config_;
  base::UniqueFd listener_;
  base::UniqueFd signals_;
  ino_t socket_inode_ = 0;
  std::optional<CgroupTree> cgroups_;
  std::string cgroup_problem_;
  std::vector<Client> clients_;
};

}  // namespace abox::helper
