#include "engine/process/child_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace abox::engine {

ChildWatch::ChildWatch(boost::asio::io_context& io, ChildProcess& child, Handler on_exit)
    : child_(child), on_exit_(std::move(on_exit)), pidfd_(io) {
  int fd = ::fcntl(child.pidfd(), F_DUPFD_CLOEXEC, 3);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "watching a child's pidfd");
  pidfd_.assign(fd);
  arm();
}

ChildWatch::~ChildWatch() {
  *alive_ = false;
  boost::system::error_code ignored;
  pidfd_.cancel(ignored);
  pidfd_.close(ignored);
}

void ChildWatch::arm() {
  pidfd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this, alive = alive_](const boost::system::error_code& ec) {
                      if (!*alive || ec) return;
                      if (auto status = child_.try_reap()) {
                        on_exit_(*status);
                        return;
                      }
                      arm();  // readable but not reapable yet (cannot happen for an exited child)
                    });
}

}  // namespace abox::engine
