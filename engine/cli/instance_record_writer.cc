#include "engine/cli/instance_record_writer.h"

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <thread>

#include "base/control_client.h"
#include "engine/daemon/instance_files.h"
#include "engine/instance/exec_wire.h"

namespace abox::engine {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kLookAgain = std::chrono::milliseconds(100);
// A supervisor answers ABOX-POLICY/1 from its loop at once; this is for one
// that is busy, not for one that is gone (a gone one's socket refuses).
constexpr auto kAnswerTimeout = std::chrono::seconds(5);

bool terminal(const std::string& state) {
  return state == "stopped" || state == "failed";
}

// Does something listen on this unix socket? A socket file whose listener
// closed or went refuses the connection.
bool accepts(const std::string& path) {
  std::string error;
  return static_cast<bool>(base::connect_unix_socket(path, error));
}

}  // namespace

std::string recorded_state(const StateFolder& folder) {
  auto record = read_json_object(folder.instance_json());
  if (!record.ok()) return "";
  const auto* s = record->if_contains("state");
  // A record without a state is one the daemon made for a boot (created).
  return s != nullptr && s->is_string() ? std::string(s->get_string()) : std::string("created");
}

base::Result<RecordWriter, std::string> wait_for_record_writer(const StateFolder& folder,
                                                               std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  const std::string api = folder.file("api.sock");
  std::string state;
  for (;;) {
    state = recorded_state(folder);
    if (state.empty()) return RecordWriter::kNoRecord;
    if (terminal(state)) return RecordWriter::kThisCommand;
    if (accepts(api)) return RecordWriter::kSupervisor;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(kLookAgain);
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(bound).count();
  return base::Err{"its supervisor is there (instance.json says " + state +
                   ") but has no api.sock open (waited " + std::to_string(waited / 1000) + "." +
                   std::to_string(waited % 1000 / 100) +
                   " s); it opens it once the VM has started, and closes it while it stops"};
}

base::Result<void, std::string> record_policy_source(const StateFolder& folder, const std::string& source,
                                                     std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto writer = wait_for_record_writer(folder, std::max(left, std::chrono::milliseconds(0)));
    if (!writer.ok()) return base::Err{writer.error()};
    if (*writer == RecordWriter::kNoRecord) return {};
    if (*writer == RecordWriter::kThisCommand) {
      auto record = read_json_object(folder.instance_json());
      if (!record.ok()) return base::Err{record.error()};
      boost::json::object o = std::move(record).value();
      o["policy"] = source;
      auto w = folder.write_file("instance.json", boost::json::serialize(o) + "\n");
      if (!w.ok()) return base::Err{w.error()};
      return {};
    }
    std::string error;
    auto reply = base::ask_unix_socket(folder.file("api.sock"), std::string(kPolicyVerb) + source, {}, error,
                                       kAnswerTimeout);
    if (reply) {
      if (*reply == "OK\n") return {};
      return base::Err{"its supervisor answered: " + *reply};
    }
    // It closed api.sock after the look (it began to stop): look again.
    if (Clock::now() >= deadline) return base::Err{"its supervisor did not answer on api.sock: " + error};
    std::this_thread::sleep_for(kLookAgain);
  }
}

}  // namespace abox::engine
