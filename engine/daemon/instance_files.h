// The files of a state folder the daemon reads and writes besides the
// supervisor's own (state_folder.h): config.json (the detached run's
// arguments), shim.json (who hosts the instance), instance.json read back,
// and the lines the daemon and the shim add to events.jsonl.
//
// Every read is bounded (kMaxRecordBytes) and parsed by Boost.JSON; a file
// that is missing, too large or not a JSON object is an error, never a crash.
// A shim is named by pid and start time together: open_shim_pidfd() opens a
// pidfd first and then checks the start time, so the pidfd it returns holds
// that very process and never one that got its pid later.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/event_log.h"
#include "base/result.h"
#include "base/unique_fd.h"

namespace abox::engine {

inline constexpr std::size_t kMaxRecordBytes = 1 << 20;

// Appends one event line (base::EventLog's format) to FOLDER/events.jsonl,
// made 0600 if missing, never through a link; best effort: an event the
// file cannot take is dropped (the instance goes on).
void append_event(const std::string& folder, const std::string& name, std::string_view kind,
                  std::initializer_list<base::EventField> fields);

base::Result<boost::json::object, std::string> read_json_object(const std::string& path);

// config.json: what `abox shim` boots.
struct DetachedConfig {
  std::vector<std::string> args;  // `abox run`'s options and command, --name included
  std::string cwd, term, lang;
  std::uint64_t boots = 0;  // how many times it was started (1 after run -d)
};
std::string detached_config_json(const DetachedConfig& c);
base::Result<DetachedConfig, std::string> read_detached_config(const std::string& folder);

struct ShimRecord {
  pid_t pid = -1;
  std::uint64_t start_ticks = 0;
};
std::string shim_record_json(const ShimRecord& r);
base::Result<ShimRecord, std::string> read_shim_record(const std::string& folder);

// A pidfd of the process (pid, start_ticks), or an empty fd when it is gone
// (or has ended and is a zombie not yet reaped).
base::UniqueFd open_shim_pidfd(const ShimRecord& r);
// True when (pid, start_ticks) still names a running process (not a zombie).
bool process_alive(pid_t pid, std::uint64_t start_ticks);

// The resident memory of pid in KiB (VmRSS), 0 if unknown.
std::uint64_t process_rss_kib(pid_t pid);

}  // namespace abox::engine
