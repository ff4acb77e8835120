// instance_record_writer: who may write an instance's instance.json now, for
// a command that changes it from outside the instance (`abox policy apply`
// names the policy it applied there).
//
// While a supervisor is there, it is the record's one writer: it rewrites
// the whole record on every transition, from what it holds, so a write from
// beside it is undone by its next one, or undoes one of its own. The record
// says a supervisor is there while its state is neither "stopped" nor
// "failed" (the supervisor's last write, or the daemon's for one that
// crashed). Such a command asks the supervisor on its api.sock
// (ABOX-POLICY/1), which it opens once its VMM has connected (booting) and
// closes when it begins to stop; before that, and while it stops, the
// command waits, bounded. Once the record says stopped or failed, no
// supervisor writes it again and the command writes it itself.
//
// Blocking, for a command-line program: each wait is a loop of short sleeps
// with a deadline, each question to api.sock has its own timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "base/result.h"
#include "engine/instance/state_folder.h"

namespace abox::engine {

enum class RecordWriter : std::uint8_t {
  kSupervisor,   // the record says it runs and api.sock takes connections: ask it
  kThisCommand,  // the record says stopped or failed: write it here
  kNoRecord,     // the folder has no instance.json: nothing names a policy
};

// instance.json's "state", or "" when the file is missing or unreadable.
std::string recorded_state(const StateFolder& folder);

// Waits at most `bound` for the record's writer to be known: kSupervisor
// once api.sock accepts a connection (the connection is closed at once,
// nothing asked), kThisCommand or kNoRecord at once. Err, after `bound`: a
// supervisor is there (its state is named) that has no api.sock open.
base::Result<RecordWriter, std::string> wait_for_record_writer(const StateFolder& folder,
                                                               std::chrono::milliseconds bound);

// Makes instance.json's "policy" `source` (an absolute path), by whichever
// writer wait_for_record_writer() finds within `bound` (a supervisor that
// closes api.sock between the look and the question is looked for again).
// A folder without a record is left so. Err: why the record still names
// the policy before.
base::Result<void, std::string> record_policy_source(const StateFolder& folder, const std::string& source,
                                                     std::chrono::milliseconds bound);

}  // namespace abox::engine
