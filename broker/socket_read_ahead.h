// SocketReadAhead: the BIO a TlsStream's SSL reads its records through.
//
// BoringSSL has no read-ahead: with a plain socket BIO it reads each record
// in two system calls (its 5-byte header, then its body). This source reads
// whatever the socket holds, up to kCapacity bytes, in one read(2), and
// hands it to the SSL in the pieces the SSL asks for. A 700-byte request
// record then costs one read, not two.
//
// Invariants:
//   - bytes it read and the SSL has not taken yet are buffered(): no
//     readiness will announce them, so the stream counts them as pending
//     (TlsStream::has_pending) and its owner reads again without waiting;
//   - the buffer exists only while it holds bytes (an idle stream keeps no
//     read-ahead memory); a drained one waits as the thread's one spare for
//     the next read, so reading allocates nothing in steady state;
//   - received() counts bytes read from the socket, as a socket BIO's
//     BIO_number_read did;
//   - the BIO refers to this object: it must outlive the SSL it is given to
//     (TlsStream declares it before its SSL), and it does not move.
// EAGAIN is a retryable read (SSL_ERROR_WANT_READ); EOF returns 0; any other
// error returns -1 with errno left as read(2) set it.
#pragma once

#include <openssl/bio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace abox::broker {

class SocketReadAhead {
 public:
  // One TLS record with its header and the largest expansion (RFC 8446 5.2).
  static constexpr std::size_t kCapacity = 16384 + 256 + 5;

  explicit SocketReadAhead(int fd) : fd_(fd) {}
  SocketReadAhead(const SocketReadAhead&) = delete;
  SocketReadAhead& operator=(const SocketReadAhead&) = delete;

  // A new BIO reading through this object (one reference, for SSL_set_bio);
  // null when BoringSSL cannot allocate one.
  BIO* new_bio();

  std::size_t buffered() const { return end_ - begin_; }
  std::size_t received() const { return received_; }

 private:
  static int read_callback(BIO* bio, char* out, int len);
  static long control_callback(BIO* bio, int cmd, long num, void* ptr);
  int read(char* out, std::size_t len, bool& retry);
  // The buffer while bytes are held: the thread's spare one when there is
  // one (no allocation per read), handed back once drained.
  void take_buffer();
  void give_buffer_back();

  int fd_;
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::size_t received_ = 0;
};

}  // namespace abox::broker
