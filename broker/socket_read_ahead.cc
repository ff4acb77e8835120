#include "broker/socket_read_ahead.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace abox::broker {

namespace {

// One method for every stream, made once (BIO_METHODs are never freed: the
// process keeps using them to its end).
const BIO_METHOD* read_ahead_method(int (*read)(BIO*, char*, int), long (*control)(BIO*, int, long, void*)) {
  static BIO_METHOD* const method = [&] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "abox socket read-ahead");
    if (m != nullptr) {
      BIO_meth_set_read(m, read);
      BIO_meth_set_ctrl(m, control);
    }
    return m;
  }();
  return method;
}

// One drained buffer kept for the next read: a stream reads and is drained
// within one call at a time (one thread, one loop), so in steady state no
// read allocates, and an idle stream still holds nothing.
thread_local std::unique_ptr<std::uint8_t[]> spare_buffer;

}  // namespace

void SocketReadAhead::take_buffer() {
  if (buffer_) return;
  buffer_ =
      spare_buffer ? std::move(spare_buffer) : std::make_unique_for_overwrite<std::uint8_t[]>(kCapacity);
}

void SocketReadAhead::give_buffer_back() {
  begin_ = end_ = 0;
  if (!spare_buffer) {
    spare_buffer = std::move(buffer_);
  } else {
    buffer_.reset();
  }
}

BIO* SocketReadAhead::new_bio() {
  const BIO_METHOD* method =
      read_ahead_method(&SocketReadAhead::read_callback, &SocketReadAhead::control_callback);
  if (method == nullptr) return nullptr;
  BIO* bio = BIO_new(method);
  if (bio == nullptr) return nullptr;
  BIO_set_data(bio, this);
  BIO_set_init(bio, 1);
  return bio;
}

int SocketReadAhead::read_callback(BIO* bio, char* out, int len) {
  BIO_clear_retry_flags(bio);
  if (len <= 0) return 0;
  bool retry = false;
  const int n =
      static_cast<SocketReadAhead*>(BIO_get_data(bio))->read(out, static_cast<std::size_t>(len), retry);
  if (retry) BIO_set_retry_read(bio);
  return n;
}

long SocketReadAhead::control_callback(BIO* /*bio*/, int cmd, long /*num*/, void* /*ptr*/) {
  // The SSL flushes its write BIO only; nothing else is asked of a source.
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int SocketReadAhead::read(char* out, std::size_t len, bool& retry) {
  if (begin_ == end_) {
    take_buffer();
    ssize_t n;
    do {
      n = ::read(fd_, buffer_.get(), kCapacity);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      const int saved = errno;
      give_buffer_back();  // nothing buffered: the stream keeps no memory
      if (n < 0 && (saved == EAGAIN || saved == EWOULDBLOCK)) retry = true;
      errno = saved;
      return n == 0 ? 0 : -1;
    }
    begin_ = 0;
    end_ = static_cast<std::size_t>(n);
    received_ += static_cast<std::size_t>(n);
  }
  const std::size_t take = len < end_ - begin_ ? len : end_ - begin_;
  std::memcpy(out, buffer_.get() + begin_, take);
  begin_ += take;
  if (begin_ == end_) give_buffer_back();
  return static_cast<int>(take);
}

}  // namespace abox::broker
