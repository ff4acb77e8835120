// StateFolder: one instance's folder on the host,
// $XDG_STATE_HOME/abox/instances/NAME (default ~/.local/state/abox/...), mode 0700.
//
//   policy.toml     the policy the instance runs with (a copy: editing the
//                   original does not change a running instance)
//   net.sock        abox-net's stream socket (QEMU's NIC); gone once QEMU connects
//   ctl.sock        the control channel's listener; gone once QEMU connects
//   broker.sock     the broker's hand-off socket (with [[broker]] bindings)
//   broker.ctl      the broker's control socket (`abox policy apply`'s reload)
//   net.stats       abox-net's stats/control socket (counters, reload)
//   broker/         the broker's state: instance CA, nonce secret
//   events.jsonl    abox-net's, the broker's and the supervisor's events, one JSON line each
//   console.log     the guest's serial console, at most kConsoleLogBytes
//   config.json     a detached instance's `abox run` arguments (the daemon's, engine/daemon/)
//   shim.json       the pid and start time of its `abox shim`
//   output.log      what its command printed (agent-reported), output.log.1 the rotated part
//   instance.json   what the instance is: state, pids with start times, image,
//                   times, exit status or failure reason (rewritten atomically)
//
// Names are 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'. create()
// refuses a folder that exists (another instance of that name, or one kept
// with --keep). Nothing the guest wrote is read back from here except as
// bounded bytes.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::engine {

inline constexpr std::size_t kConsoleLogBytes = 4 << 20;

bool valid_instance_name(std::string_view name);

// $XDG_STATE_HOME/abox/instances, else $HOME/.local/state/abox/instances.
base::Result<std::string, std::string> default_instances_root();

// A file written beside its final name but not yet in place (StateFolder::
// stage_file): commit() renames it over the final name; destroyed
// uncommitted, it is removed. read() is an fd of it open for reading, which
// after commit() is the file at the final name (the same inode).
class StagedFile {
 public:
  StagedFile(std::string temp_path, std::string final_path, base::UniqueFd read_fd)
      : temp_(std::move(temp_path)), final_(std::move(final_path)), read_fd_(std::move(read_fd)) {}
  StagedFile(StagedFile&& other) noexcept;
  StagedFile& operator=(StagedFile&&) = delete;
  StagedFile(const StagedFile&) = delete;
  ~StagedFile();

  int read() const { return read_fd_.get(); }
  base::Result<void, std::string> commit();

 private:
  std::string temp_;  // "" once committed or moved from
  std::string final_;
  base::UniqueFd read_fd_;
};

class StateFolder {
 public:
  // Makes root (and its parents, 0700) and root/NAME (0700).
  static base::Result<StateFolder, std::string> create(const std::string& root, const std::string& name);
  // An existing root/NAME (a real folder, not a symlink), for the daemon and
  // for an instance booted again.
  static base::Result<StateFolder, std::string> open(const std::string& root, const std::string& name);

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
  std::string policy() const { return file("policy.toml"); }
  std::string net_socket() const { return file("net.sock"); }
  std::string control_socket() const { return file("ctl.sock"); }
  std::string broker_socket() const { return file("broker.sock"); }
  std::string broker_control_socket() const { return file("broker.ctl"); }
  std::string net_stats_socket() const { return file("net.stats"); }
  std::string broker_state() const { return file("broker"); }
  std::string events() const { return file("events.jsonl"); }
  std::string console_log() const { return file("console.log"); }
  std::string instance_json() const { return file("instance.json"); }

  // Writes `contents` to name atomically (a temporary file, then rename), mode 0600.
  base::Result<void, std::string> write_file(std::string_view name, std::string_view contents) const;
  // The same, in two steps: the temporary file written now, renamed into
  // place by the StagedFile's commit().
  base::Result<StagedFile, std::string> stage_file(std::string_view name, std::string_view contents) const;
  // Removes the folder and everything in it (never following a symlink out of it).
  base::Result<void, std::string> remove() const;

 private:
  explicit StateFolder(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace abox::engine
