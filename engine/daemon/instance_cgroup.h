// An instance's cgroup, made by abox-helper (docs/helper.md), as the shim
// and the daemon see it.
//
// The shim, before its supervisor starts abox-net, the broker and QEMU, asks
// the helper to make the cgroup NAME (the instance's name) with
// instance_cgroup_limits() and to move the shim itself into it; every process
// the shim starts afterwards is born inside. place_in_cgroup() is that
// sequence; its outcome is the instance's cgroup record (cgroup.json in the
// state folder), which `abox inspect`, `ls --json` and the events show:
//
//   {"state":"creating","name":N}   written BEFORE cgroup-create, so a shim
//                                   killed in between still leaves a name
//                                   the daemon deletes;
//   {"state":"placed","name":N,"memory_max":B,"cpu_max":"Q/P","pids_max":P}
//                                   the shim (so every process of the
//                                   instance) is in it, the limits written;
//   {"state":"none","reason":R}     no cgroup: no helper, the helper has no
//                                   cgroups on this host, or a step failed
//                                   (the partial cgroup is deleted again);
//   {"state":"removed","name":N}    the instance ended; the daemon deleted it.
//
// The cgroup outlives the shim only until its last process is gone; the
// daemon deletes it (cgroup_sweeper.h), never the shim, which cannot delete
// the cgroup it is inside and may be SIGKILLed.
//
// CgroupHelper is the three helper calls this needs, so the sequence is
// unit-tested without root; HelperCgroups is the real one over HelperClient.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "helper/client.h"
#include "helper/wire.h"

namespace abox::engine {

// What an instance's processes besides the guest's memory and vCPUs may use
// (QEMU's own memory and TCG code cache, abox-net, the broker, the shim).
inline constexpr std::uint64_t kCgroupMemoryOverheadMib = 384;
// QEMU on TCG fills a translation cache of up to 1 GiB (QEMU's default
// tb-size on 64-bit hosts) before it flushes it: anonymous memory, so a
// limit without room for it would OOM-kill a long-running TCG guest.
inline constexpr std::uint64_t kCgroupTcgCacheMib = 1024;
inline constexpr std::uint64_t kCgroupCpuOverhead = 1;  // one CPU more than --cpus
inline constexpr std::uint64_t kCgroupCpuPeriodUs = 100000;
// Host processes of one instance: a few dozen (QEMU's threads and its I/O
// workers, abox-net, the broker, exec relays); this bounds a fork bomb.
inline constexpr std::uint64_t kCgroupPidsMax = 1024;
// How long one helper call may take before the caller gives up on it.
inline constexpr std::chrono::milliseconds kHelperCallTimeout{2000};

// memory.max = (memory_mib + overhead [+ TCG's cache]) MiB, cpu.max =
// (cpus + 1) x 100 ms per 100 ms, pids.max = kCgroupPidsMax; each clamped
// into the helper's limits. may_use_tcg: the guest may run on TCG (--accel
// tcg, or auto: the cgroup is made before the KVM probe decides).
helper::CgroupLimits instance_cgroup_limits(std::uint64_t memory_mib, std::uint64_t cpus, bool may_use_tcg);

class CgroupHelper {
 public:
  virtual ~CgroupHelper() = default;
  virtual base::Result<void, helper::HelperError> create(std::string_view name,
                                                         const helper::CgroupLimits& limits) = 0;
  virtual base::Result<void, helper::HelperError> move(std::string_view name, pid_t pid) = 0;
  virtual base::Result<void, helper::HelperError> remove(std::string_view name) = 0;
};

// The real helper: one connection to helper_socket_path(uid).
class HelperCgroups : public CgroupHelper {
 public:
  static base::Result<HelperCgroups, helper::HelperError> connect(const std::string& socket_path);
  base::Result<void, helper::HelperError> create(std::string_view name,
                                                 const helper::CgroupLimits& limits) override;
  base::Result<void, helper::HelperError> move(std::string_view name, pid_t pid) override;
  base::Result<void, helper::HelperError> remove(std::string_view name) override;

 private:
  explicit HelperCgroups(helper::HelperClient c) : client_(std::move(c)) {}
  helper::HelperClient client_;
};

struct CgroupRecord {
  enum class State { kCreating, kPlaced, kNone, kRemoved };
  State state = State::kNone;
  std::string name;             // kCreating, kPlaced, kRemoved
  helper::CgroupLimits limits;  // kPlaced
  std::string reason;           // kNone; kCreating after a failed move the helper could not undo
  bool operator==(const CgroupRecord&) const = default;

  // True while the helper may hold a cgroup of this name for the instance.
  bool may_exist() const { return state == State::kCreating || state == State::kPlaced; }
};
std::string_view cgroup_state_name(CgroupRecord::State s);
std::string cgroup_record_json(const CgroupRecord& r);  // one line, LF-ended
// Strict: an unknown state, a name the helper would refuse, or a missing
// field is an error.
base::Result<CgroupRecord, std::string> parse_cgroup_record(const boost::json::object& o);
boost::json::object cgroup_record_object(const CgroupRecord& r);
// FOLDER/cgroup.json; a missing file is a kNone record saying so.
CgroupRecord read_cgroup_record(const std::string& folder);
inline constexpr std::string_view kCgroupRecordFile = "cgroup.json";

// The shim's sequence. helper is nullptr when none answered (unreachable
// says why). write_record is called with the kCreating record before
// cgroup-create; its failure stops the sequence (no name on disk, no
// cgroup). An `exists` answer is a leftover of an earlier boot of this name
// (the daemon never runs two instances of one name): it is deleted (only
// possible when empty) and made once more. A failed move deletes the cgroup.
CgroupRecord place_in_cgroup(CgroupHelper* helper, std::string_view unreachable, const std::string& name,
                             const helper::CgroupLimits& limits, pid_t pid,
                             const std::function<bool(const CgroupRecord&)>& write_record);

}  // namespace abox::engine
