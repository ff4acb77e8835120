#include "broker/tls_stream.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/mem.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace abox::broker {

TlsStream::TlsStream(base::UniqueFd fd, SslPtr ssl)
    : fd_(std::move(fd)), read_ahead_(fd_.get()), ssl_(std::move(ssl)) {
  BIO* reads = read_ahead_.new_bio();
  BIO* writes = BIO_new_socket(fd_.get(), BIO_NOCLOSE);
  if (reads != nullptr && writes != nullptr) {
    SSL_set_bio(ssl_.get(), reads, writes);  // the SSL owns both from here
  } else {
    // Out of memory at BIO_new: the plain socket BIO for both ways (what
    // SSL_set_fd gives), slower but whole.
    if (reads != nullptr) BIO_free(reads);
    if (writes != nullptr) BIO_free(writes);
    SSL_set_fd(ssl_.get(), fd_.get());
  }
  SSL_set_mode(ssl_.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

TlsIo TlsStream::classify(int ret) {
  int err = SSL_get_error(ssl_.get(), ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      want_read_ = true;
      return TlsIo::would_block;
    case SSL_ERROR_WANT_WRITE:
      want_write_ = true;
      return TlsIo::would_block;
    case SSL_ERROR_ZERO_RETURN:
      return TlsIo::closed;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        // EOF without close_notify (ret 0) or a socket error.
        error_ = ret == 0 ? "connection closed without close_notify" : std::strerror(errno);
        ERR_clear_error();
        return ret == 0 ? TlsIo::closed : TlsIo::failed;
      }
      [[fallthrough]];
    default:
      error_ = take_tls_error();
      if (error_.empty()) error_ = "TLS error " + std::to_string(err);
      return TlsIo::failed;
  }
}

TlsIo TlsStream::handshake() {
  if (handshake_done_) return TlsIo::done;
  want_read_ = want_write_ = false;
  int ret = SSL_do_handshake(ssl_.get());
  if (ret == 1) {
    handshake_done_ = true;
    return TlsIo::done;
  }
  TlsIo r = classify(ret);
  // EOF during the handshake is a failure, not a clean close.
  return r == TlsIo::closed ? TlsIo::failed : r;
}

TlsIo TlsStream::read(std::string& out, std::size_t max) {
  want_read_ = false;
  if (max == 0) return TlsIo::would_block;
  // Into a fixed buffer, then appended: growing `out` first would zero-fill
  // 16 KiB on every call.
  std::size_t chunk = max < read_buffer_.size() ? max : read_buffer_.size();
  int ret = SSL_read(ssl_.get(), read_buffer_.data(), static_cast<int>(chunk));
  if (ret > 0) {
    out.append(read_buffer_.data(), static_cast<std::size_t>(ret));
    return TlsIo::done;
  }
  return classify(ret);
}

bool TlsStream::has_pending() const {
  return SSL_pending(ssl_.get()) > 0 || read_ahead_.buffered() > 0;
}

std::size_t TlsStream::bytes_received() const {
  if (read_ahead_.received() > 0) return read_ahead_.received();
  const BIO* rbio = SSL_get_rbio(ssl_.get());  // the fallback socket BIO, if it is the one
  return rbio == nullptr ? 0 : BIO_number_read(rbio);
}

TlsIo TlsStream::flush() {
  want_write_ = false;
  while (out_sent_ < out_.size()) {
    std::size_t left = out_.size() - out_sent_;
    int n = left > INT_MAX ? INT_MAX : static_cast<int>(left);
    int ret = SSL_write(ssl_.get(), out_.data() + out_sent_, n);
    if (ret <= 0) {
      TlsIo r = classify(ret);
      return r == TlsIo::closed ? TlsIo::failed : r;
    }
    out_sent_ += static_cast<std::size_t>(ret);
  }
  // What was sent may hold a key (upstream) or a response: wiped, not kept.
  OPENSSL_cleanse(out_.data(), out_.size());
  out_.clear();
  out_sent_ = 0;
  return TlsIo::done;
}

void TlsStream::shutdown() {
  if (handshake_done_) SSL_shutdown(ssl_.get());
  ERR_clear_error();
}

}  // namespace abox::broker
