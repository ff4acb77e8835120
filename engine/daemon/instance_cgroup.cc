#include "engine/daemon/instance_cgroup.h"

#include <algorithm>
#include <boost/json/serialize.hpp>
#include <charconv>
#include <utility>

#include "engine/daemon/instance_files.h"

namespace abox::engine {

namespace json = boost::json;
using helper::ErrorCode;
using helper::HelperError;

helper::CgroupLimits instance_cgroup_limits(std::uint64_t memory_mib, std::uint64_t cpus, bool may_use_tcg) {
  helper::CgroupLimits l;
  // Bounded before multiplying: no overflow whatever the arguments.
  const std::uint64_t max_mib = helper::kMaxMemoryMax >> 20;
  const std::uint64_t overhead = kCgroupMemoryOverheadMib + (may_use_tcg ? kCgroupTcgCacheMib : 0);
  const std::uint64_t mib = std::min(std::min(memory_mib, max_mib) + overhead, max_mib);
  l.memory_max = mib << 20;
  const std::uint64_t cpu_count = std::min(std::min(cpus, helper::kMaxCpuQuotaPerPeriod) + kCgroupCpuOverhead,
                                           helper::kMaxCpuQuotaPerPeriod);
  l.cpu_max = helper::CpuMax{cpu_count * kCgroupCpuPeriodUs, kCgroupCpuPeriodUs};
  l.pids_max = kCgroupPidsMax;
  return l;
}

// ---- the real helper ----

base::Result<HelperCgroups, HelperError> HelperCgroups::connect(const std::string& socket_path) {
  auto c = helper::HelperClient::connect(socket_path, kHelperCallTimeout);
  if (!c.ok()) return base::Err{c.error()};
  return HelperCgroups(std::move(c).value());
}
base::Result<void, HelperError> HelperCgroups::create(std::string_view name,
                                                      const helper::CgroupLimits& limits) {
  return client_.create_cgroup(name, limits);
}
base::Result<void, HelperError> HelperCgroups::move(std::string_view name, pid_t pid) {
  const pid_t pids[] = {pid};
  return client_.move_into_cgroup(name, pids);
}
base::Result<void, HelperError> HelperCgroups::remove(std::string_view name) {
  return client_.delete_cgroup(name);
}

// ---- the record ----

std::string_view cgroup_state_name(CgroupRecord::State s) {
  switch (s) {
    case CgroupRecord::State::kCreating:
      return "creating";
    case CgroupRecord::State::kPlaced:
      return "placed";
    case CgroupRecord::State::kNone:
      return "none";
    case CgroupRecord::State::kRemoved:
      return "removed";
  }
  return "none";
}

namespace {

json::value limit_value(const std::optional<std::uint64_t>& v) {
  if (!v) return "max";
  return *v;
}

std::string cpu_text(const std::optional<helper::CpuMax>& c) {
  if (!c) return "max";
  return std::to_string(c->quota_us) + "/" + std::to_string(c->period_us);
}

// A limit as the record spells it: a non-negative integer, or "max".
base::Result<std::optional<std::uint64_t>, std::string> read_limit(const json::object& o,
                                                                   std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return base::Err{"no " + std::string(key)};
  if (v->is_string() && v->get_string() == "max") return std::optional<std::uint64_t>{};
  if (v->is_uint64()) return std::optional<std::uint64_t>{v->get_uint64()};
  if (v->is_int64() && v->get_int64() >= 0)
    return std::optional<std::uint64_t>{static_cast<std::uint64_t>(v->get_int64())};
  return base::Err{std::string(key) + " is not a number or \"max\""};
}

base::Result<std::optional<helper::CpuMax>, std::string> read_cpu(const json::object& o) {
  const json::value* v = o.if_contains("cpu_max");
  if (v == nullptr || !v->is_string()) return base::Err{std::string("no cpu_max")};
  std::string_view s = v->get_string();
  if (s == "max") return std::optional<helper::CpuMax>{};
  const auto slash = s.find('/');
  helper::CpuMax c;
  if (slash == std::string_view::npos) return base::Err{std::string("cpu_max is not QUOTA/PERIOD")};
  auto a = std::from_chars(s.data(), s.data() + slash, c.quota_us);
  auto b = std::from_chars(s.data() + slash + 1, s.data() + s.size(), c.period_us);
  if (a.ec != std::errc{} || a.ptr != s.data() + slash || b.ec != std::errc{} || b.ptr != s.data() + s.size())
    return base::Err{std::string("cpu_max is not QUOTA/PERIOD")};
  return std::optional<helper::CpuMax>{c};
}

}  // namespace

json::object cgroup_record_object(const CgroupRecord& r) {
  json::object o{{"state", cgroup_state_name(r.state)}};
  if (r.state == CgroupRecord::State::kNone) {
    o["reason"] = r.reason;
    return o;
  }
  o["name"] = r.name;
  if (!r.reason.empty()) o["reason"] = r.reason;
  if (r.state == CgroupRecord::State::kPlaced) {
    o["memory_max"] = limit_value(r.limits.memory_max);
    o["cpu_max"] = cpu_text(r.limits.cpu_max);
    o["pids_max"] = limit_value(r.limits.pids_max);
  }
  return o;
}

std::string cgroup_record_json(const CgroupRecord& r) {
  return json::serialize(cgroup_record_object(r)) + "\n";
}

base::Result<CgroupRecord, std::string> parse_cgroup_record(const json::object& o) {
  CgroupRecord r;
  const json::value* state = o.if_contains("state");
  if (state == nullptr || !state->is_string()) return base::Err{std::string("no state")};
  std::string_view s = state->get_string();
  if (s == "creating") {
    r.state = CgroupRecord::State::kCreating;
  } else if (s == "placed") {
    r.state = CgroupRecord::State::kPlaced;
  } else if (s == "none") {
    r.state = CgroupRecord::State::kNone;
  } else if (s == "removed") {
    r.state = CgroupRecord::State::kRemoved;
  } else {
    return base::Err{"unknown state '" + std::string(s) + "'"};
  }
  if (r.state == CgroupRecord::State::kNone) {
    const json::value* reason = o.if_contains("reason");
    if (reason == nullptr || !reason->is_string()) return base::Err{std::string("no reason")};
    r.reason = std::string(reason->get_string());
    return r;
  }
  const json::value* name = o.if_contains("name");
  if (name == nullptr || !name->is_string() || !helper::valid_instance_name(name->get_string()))
    return base::Err{std::string("no valid name")};
  r.name = std::string(name->get_string());
  if (const json::value* reason = o.if_contains("reason"); reason != nullptr) {
    if (!reason->is_string()) return base::Err{std::string("reason is not a string")};
    r.reason = std::string(reason->get_string());
  }
  if (r.state == CgroupRecord::State::kPlaced) {
    auto m = read_limit(o, "memory_max");
    if (!m.ok()) return base::Err{m.error()};
    auto p = read_limit(o, "pids_max");
    if (!p.ok()) return base::Err{p.error()};
    auto c = read_cpu(o);
    if (!c.ok()) return base::Err{c.error()};
    r.limits = {*m, *c, *p};
  }
  return r;
}

CgroupRecord read_cgroup_record(const std::string& folder) {
  const std::string path = folder + "/" + std::string(kCgroupRecordFile);
  auto o = read_json_object(path);
  CgroupRecord r;
  if (!o.ok()) {
    r.reason = "no cgroup record (the instance has not started since abox gave instances cgroups)";
    return r;
  }
  auto parsed = parse_cgroup_record(*o);
  if (!parsed.ok()) {
    r.reason = "unreadable cgroup record " + path + ": " + parsed.error();
    return r;
  }
  return std::move(parsed).value();
}

// ---- the shim's sequence ----

CgroupRecord place_in_cgroup(CgroupHelper* helper, std::string_view unreachable, const std::string& name,
                             const helper::CgroupLimits& limits, pid_t pid,
                             const std::function<bool(const CgroupRecord&)>& write_record) {
  auto none = [](std::string reason) {
    CgroupRecord r;
    r.reason = std::move(reason);
    return r;
  };
  if (helper == nullptr) return none("no abox-helper answers (" + std::string(unreachable) + ")");
  if (!helper::valid_instance_name(name)) return none("'" + name + "' is not a name the helper takes");
  CgroupRecord creating{CgroupRecord::State::kCreating, name, {}, {}};
  if (!write_record(creating)) return none("could not write the cgroup record before asking the helper");
  auto made = helper->create(name, limits);
  if (!made.ok() && made.error().kind == HelperError::Kind::kRefused &&
      made.error().code == ErrorCode::kExists) {
    // A leftover of an earlier boot of this name (deleted only when empty).
    auto removed = helper->remove(name);
    if (!removed.ok())
      return none("a cgroup named '" + name +
                  "' exists and could not be deleted: " + removed.error().to_string());
    made = helper->create(name, limits);
  }
  if (!made.ok()) {
    if (made.error().kind == HelperError::Kind::kRefused && made.error().code == ErrorCode::kUnavailable)
      return none("abox-helper has no cgroups on this host: " + made.error().message);
    return none("abox-helper could not make the cgroup: " + made.error().to_string());
  }
  auto moved = helper->move(name, pid);
  if (!moved.ok()) {
    auto removed = helper->remove(name);
    CgroupRecord r =
        none("abox-helper could not move the shim into its cgroup: " + moved.error().to_string());
    // Still there: the record keeps the name so the daemon deletes it later.
    if (!removed.ok()) return CgroupRecord{CgroupRecord::State::kCreating, name, {}, r.reason};
    return r;
  }
  return CgroupRecord{CgroupRecord::State::kPlaced, name, limits, {}};
}

}  // namespace abox::engine
