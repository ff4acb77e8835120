// read_whole_file(): the whole of a small file that is not a secret (a
// policy), with a size cap and an error that says what is wrong. One reader
// for every place that read a policy's text by hand: `abox policy apply` and
// `abox broker reload` (engine/cli/control_request.h), the supervisor's copy
// of an instance's policy, load_policy() (policy/policy_file.h), and abox-net's
// reload client and SIGHUP (netstack/program/reload_command.h).
//
// The path is opened O_NONBLOCK (a FIFO with no writer never blocks the
// reader) and must be a regular file: a folder, a FIFO, a socket or a device
// is refused before a byte is read. The cap is checked against the size and
// again while reading (a file that grows meanwhile is cut off at
// max_bytes + 1 and refused). read_whole_fd() reads an open fd the same way,
// from offset 0 (pread: the fd's offset is untouched, so a file kept open is
// read again whole each time).
// (Secrets have their own reader, with owner and mode checks: private_file.h.)
#pragma once

#include <cstddef>
#include <string>

#include "base/result.h"

namespace abox::base {

struct WholeFileError {
  enum class Kind {
    kCannotOpen,  // open(2) failed: message is the errno text
    kFolder,      // "it is a folder, not a file"
    kNotRegular,  // "it is not a regular file" (a FIFO, a socket, a device)
    kTooLarge,    // "larger than N MiB" (or N bytes)
    kCannotRead,  // fstat or read failed: message is the errno text
  };
  Kind kind = Kind::kCannotRead;
  std::string message;
};

base::Result<std::string, WholeFileError> read_whole_file(const std::string& path, std::size_t max_bytes);
base::Result<std::string, WholeFileError> read_whole_fd(int fd, std::size_t max_bytes);

}  // namespace abox::base
