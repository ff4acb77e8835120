// ChildWatch: tells the io_context's owner, once, that a child has ended.
//
// It waits for the child's pidfd to become readable (the kernel makes it so
// when the child exits) on the io_context: no SIGCHLD handler, no blocking
// waitpid, no thread. The handler runs on the io_context with the status the
// ChildProcess reaped. Destroying the watch cancels it (the handler does not
// run); the ChildProcess must outlive its watch.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>

#include "engine/process/child_process.h"

namespace abox::engine {

class ChildWatch {
 public:
  using Handler = std::function<void(const ExitStatus&)>;
  ChildWatch(boost::asio::io_context& io, ChildProcess& child, Handler on_exit);
  ChildWatch(const ChildWatch&) = delete;
  ChildWatch& operator=(const ChildWatch&) = delete;
  ~ChildWatch();

 private:
  void arm();
  ChildProcess& child_;
  Handler on_exit_;
  boost::asio::posix::stream_descriptor pidfd_;                 // a dup of the child's pidfd, owned here
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // outlives a cancelled wait's completion
};

}  // namespace abox::engine
