// TlsStream: one TLS connection over a non-blocking socket, either side.
//
// Owns the socket and the SSL. Writes are queued in an output buffer and
// flushed as the socket takes them; reads hand out plaintext as it arrives.
// After each call the stream knows which readiness it waits for
// (wants_read_event / wants_write_event), which the owner gives to the loop:
// TLS may need to read while writing and the reverse.
//
// Sent bytes are wiped from the output buffer once it drains (the upstream
// side carries the key).
//
// Bounds: the output buffer is the owner's to bound (queued_bytes()); the
// owner stops reading from the other side while it is over its limit.
//
// Reads go through a read-ahead source (socket_read_ahead.h: one read(2)
// per record, not two); writes through a plain socket BIO. Bytes read ahead
// count as pending: an owner that stops reading while has_pending() holds
// must come back without waiting for readiness. The stream does not move
// (its SSL's BIO points into it): owners hold it by unique_ptr.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "broker/socket_read_ahead.h"
#include "broker/tls.h"

namespace abox::broker {

enum class TlsIo : std::uint8_t {
  done,         // the operation finished (handshake complete, bytes read, all flushed)
  would_block,  // wait for wants_read_event / wants_write_event
  closed,       // the peer closed cleanly (close_notify or EOF where allowed)
  failed,       // a TLS or socket error: drop the connection
};

class TlsStream {
 public:
  TlsStream(base::UniqueFd fd, SslPtr ssl);
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  int fd() const { return fd_.get(); }
  SSL* ssl() const { return ssl_.get(); }

  TlsIo handshake();
  bool handshake_done() const { return handshake_done_; }

  // Appends up to `max` plaintext bytes to `out`. done: at least one byte.
  TlsIo read(std::string& out, std::size_t max);
  // Bytes decrypted but not read yet, or read from the socket and not yet
  // given to TLS (no readiness will announce either).
  bool has_pending() const;
  // Bytes read from the socket so far, TLS records included, whole or not:
  // tells that a peer sent something before a whole record decrypts.
  std::size_t bytes_received() const;

  void queue(std::string_view bytes) { out_.append(bytes); }
  std::size_t queued_bytes() const { return out_.size() - out_sent_; }
  // Writes queued bytes; done when none remain.
  TlsIo flush();
  // Sends close_notify (best effort) after the queue is flushed.
  void shutdown();

  bool wants_read_event() const { return want_read_; }
  bool wants_write_event() const { return want_write_ || queued_bytes() > 0; }
  // The last library error, for events (never carries plaintext).
  const std::string& error_text() const { return error_; }

 private:
  TlsIo classify(int ret);

  base::UniqueFd fd_;
  // Before ssl_: the SSL's read BIO points here, so this outlives it.
  SocketReadAhead read_ahead_;
  SslPtr ssl_;
  std::string out_;
  std::array<char, 16384> read_buffer_{};  // one TLS record's worth
  std::size_t out_sent_ = 0;
  bool handshake_done_ = false;
  bool want_read_ = false;
  bool want_write_ = false;
  std::string error_;
};

}  // namespace abox::broker
