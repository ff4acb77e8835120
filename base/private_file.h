// read_private_file: the whole of a small file that holds a secret (a key,
// a credential store), read only when nobody else could have put it there
// or read it.
//
// The file is refused, with a message that names the path and says what to
// do, when it
//   - is a symlink (O_NOFOLLOW: the last component; a symlinked folder above
//     it is the folder owner's business),
//   - is not a regular file (a folder, a FIFO: opened O_NONBLOCK, so a FIFO
//     with no writer never blocks the reader; a socket, a device),
//   - is owned by another user than the effective one, or group or others
//     may read or write it (mode & 077), unless the caller asks only for
//     Readers::anyone (a certificate: public, but still no symlink and a cap),
//   - holds more than max_bytes (checked while reading too: a file that grows
//     after fstat() is cut off at max_bytes + 1 and refused).
// A file that does not exist is Fault::missing, so a caller may create it.
//
// On every refusal after bytes were read, the buffer is wiped before it is
// freed; the caller wipes the returned text when done with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::base {

struct PrivateFileError {
  enum class Fault : std::uint8_t {
    missing,      // ENOENT
    symlink,      // ELOOP from O_NOFOLLOW
    not_regular,  // a folder, FIFO, socket or device
    wrong_owner,  // not the effective user's
    too_open,     // group or others may read or write it
    too_large,    // more than max_bytes
    unreadable,   // any other open/fstat/read error
  };
  Fault fault;
  std::string message;  // "<path>: <what is wrong>[: <what to do>]"
};

enum class Readers : std::uint8_t { owner_only, anyone };

// Reads all of `path` (at most max_bytes). See the header comment for what
// is refused.
Result<std::string, PrivateFileError> read_private_file(const std::string& path, std::size_t max_bytes,
                                                        Readers readers = Readers::owner_only);

// Reads fd to its end (a pipe, a file), at most max_bytes: more is
// Fault::too_large ("more than <max_bytes> bytes"), a read error
// Fault::unreadable (errno's text); the message names no path. What was
// read is wiped on refusal.
Result<std::string, PrivateFileError> read_all_bounded(int fd, std::size_t max_bytes);

// Overwrites s's bytes with zeros in a way the compiler keeps.
void wipe(std::string& s);

}  // namespace abox::base
