// An instance's cgroup without root: the limits from --memory/--cpus, the
// shim's sequence against a scripted helper (create, move, the leftover of an
// earlier boot, every failure), the record read back strictly, and the
// daemon's list of cgroups to delete with one sweep pass over it.
#include "engine/daemon/instance_cgroup.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <boost/json/parse.hpp>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include "base/byte_reader.h"
#include "engine/daemon/cgroup_sweeper.h"
#include "tests/support/temp_dir.h"

namespace abox::engine {
namespace {

using helper::ErrorCode;
using helper::HelperError;
using Answer = base::Result<void, HelperError>;

Answer refused(ErrorCode code) {
  return base::Err{HelperError{HelperError::Kind::kRefused, code, "scripted"}};
}
Answer gone() {
  return base::Err{HelperError{HelperError::Kind::kUnreachable, ErrorCode::kSystem, "scripted"}};
}

// Records every call; answers each from its queue (ok when empty).
class ScriptedHelper : public CgroupHelper {
 public:
  std::vector<std::string> calls;
  std::deque<Answer> creates, moves, removes;
  Answer create(std::string_view name, const helper::CgroupLimits&) override {
    calls.push_back("create " + std::string(name));
    return next(creates);
  }
  Answer move(std::string_view name, pid_t pid) override {
    calls.push_back("move " + std::string(name) + " " + std::to_string(pid));
    return next(moves);
  }
  Answer remove(std::string_view name) override {
    calls.push_back("delete " + std::string(name));
    return next(removes);
  }

 private:
  static Answer next(std::deque<Answer>& q) {
    if (q.empty()) return {};
    Answer a = std::move(q.front());
    q.pop_front();
    return a;
  }
};

struct Placement {
  std::vector<CgroupRecord> written;
  CgroupRecord run(CgroupHelper* h, const std::string& name = "dev", bool write_ok = true) {
    return place_in_cgroup(h, "no socket", name, instance_cgroup_limits(512, 2, false), 4242,
                           [&](const CgroupRecord& r) {
                             written.push_back(r);
                             return write_ok;
                           });
  }
};

TEST(InstanceCgroupLimits, GuestPlusOverhead) {
  auto l = instance_cgroup_limits(512, 2, false);
  EXPECT_EQ(l.memory_max, (512 + kCgroupMemoryOverheadMib) << 20);
  EXPECT_EQ(instance_cgroup_limits(512, 2, true).memory_max,
            (512 + kCgroupMemoryOverheadMib + kCgroupTcgCacheMib) << 20);
  ASSERT_TRUE(l.cpu_max.has_value());
  EXPECT_EQ(l.cpu_max->quota_us, 300000u);
  EXPECT_EQ(l.cpu_max->period_us, 100000u);
  EXPECT_EQ(l.pids_max, kCgroupPidsMax);
}

TEST(InstanceCgroupLimits, AlwaysWithinTheHelpersLimits) {
  for (std::uint64_t mib : {0ull, 1ull, 1ull << 20, ~0ull}) {
    for (std::uint64_t cpus : {0ull, 1ull, 1023ull, 1024ull, ~0ull}) {
      auto l = instance_cgroup_limits(mib, cpus, true);
      helper::CgroupCreateRequest req{"x", l};
      const std::string text = helper::format_request(req);
      auto parsed = helper::parse_request(base::as_bytes(text), 0);
      EXPECT_TRUE(parsed.ok()) << mib << " MiB, " << cpus << " CPUs: " << text;
    }
  }
}

TEST(PlaceInCgroup, CreatesThenMovesTheShimAfterWritingTheName) {
  ScriptedHelper h;
  Placement p;
  CgroupRecord r = p.run(&h);
  EXPECT_EQ(h.calls, (std::vector<std::string>{"create dev", "move dev 4242"}));
  ASSERT_EQ(p.written.size(), 1u);
  EXPECT_EQ(p.written[0].state, CgroupRecord::State::kCreating);  // before create
  EXPECT_EQ(p.written[0].name, "dev");
  EXPECT_EQ(r.state, CgroupRecord::State::kPlaced);
  EXPECT_EQ(r.limits, instance_cgroup_limits(512, 2, false));
}

TEST(PlaceInCgroup, NoHelperNoCallsAndSaysWhy) {
  Placement p;
  CgroupRecord r = p.run(nullptr);
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("no abox-helper answers (no socket)"), std::string::npos) << r.reason;
  EXPECT_TRUE(p.written.empty());
}

TEST(PlaceInCgroup, UnavailableOnThisHost) {
  ScriptedHelper h;
  h.creates.push_back(refused(ErrorCode::kUnavailable));
  CgroupRecord r = Placement().run(&h);
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("no cgroups on this host"), std::string::npos) << r.reason;
  EXPECT_EQ(h.calls, (std::vector<std::string>{"create dev"}));
}

TEST(PlaceInCgroup, ALeftoverOfTheSameNameIsDeletedAndMadeAgain) {
  ScriptedHelper h;
  h.creates.push_back(refused(ErrorCode::kExists));
  CgroupRecord r = Placement().run(&h);
  EXPECT_EQ(h.calls, (std::vector<std::string>{"create dev", "delete dev", "create dev", "move dev 4242"}));
  EXPECT_EQ(r.state, CgroupRecord::State::kPlaced);
}

TEST(PlaceInCgroup, ABusyCgroupOfTheSameNameIsNotTakenOver) {
  ScriptedHelper h;
  h.creates.push_back(refused(ErrorCode::kExists));
  h.removes.push_back(refused(ErrorCode::kBusy));
  CgroupRecord r = Placement().run(&h);
  EXPECT_EQ(h.calls, (std::vector<std::string>{"create dev", "delete dev"}));
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("could not be deleted"), std::string::npos) << r.reason;
}

TEST(PlaceInCgroup, AFailedMoveDeletesTheCgroup) {
  ScriptedHelper h;
  h.moves.push_back(refused(ErrorCode::kNotPermitted));
  CgroupRecord r = Placement().run(&h);
  EXPECT_EQ(h.calls, (std::vector<std::string>{"create dev", "move dev 4242", "delete dev"}));
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("not-permitted"), std::string::npos) << r.reason;
}

TEST(PlaceInCgroup, AFailedMoveAndDeleteKeepsTheNameForTheDaemon) {
  ScriptedHelper h;
  h.moves.push_back(gone());
  h.removes.push_back(gone());
  CgroupRecord r = Placement().run(&h);
  EXPECT_EQ(r.state, CgroupRecord::State::kCreating);
  EXPECT_TRUE(r.may_exist());
  EXPECT_EQ(r.name, "dev");
}

TEST(PlaceInCgroup, NothingAskedWhenTheRecordCannotBeWritten) {
  ScriptedHelper h;
  CgroupRecord r = Placement().run(&h, "dev", /*write_ok=*/false);
  EXPECT_TRUE(h.calls.empty());
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
}

TEST(PlaceInCgroup, ANameTheHelperWouldRefuseIsNotSent) {
  ScriptedHelper h;
  CgroupRecord r = Placement().run(&h, "../etc");
  EXPECT_TRUE(h.calls.empty());
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
}

CgroupRecord round_trip(const CgroupRecord& r) {
  auto v = boost::json::parse(cgroup_record_json(r));
  auto back = parse_cgroup_record(v.as_object());
  EXPECT_TRUE(back.ok()) << cgroup_record_json(r);
  return back.ok() ? *back : CgroupRecord{};
}

TEST(CgroupRecord, RoundTripsEveryState) {
  CgroupRecord placed{CgroupRecord::State::kPlaced, "dev", instance_cgroup_limits(256, 1, true), {}};
  EXPECT_EQ(round_trip(placed), placed);
  CgroupRecord unlimited{CgroupRecord::State::kPlaced, "dev", {}, {}};
  EXPECT_EQ(round_trip(unlimited), unlimited);
  CgroupRecord creating{CgroupRecord::State::kCreating, "a.b_c-1", {}, "why"};
  EXPECT_EQ(round_trip(creating), creating);
  CgroupRecord none{CgroupRecord::State::kNone, {}, {}, "no helper"};
  EXPECT_EQ(round_trip(none), none);
  CgroupRecord removed{CgroupRecord::State::kRemoved, "dev", {}, {}};
  EXPECT_EQ(round_trip(removed), removed);
  EXPECT_FALSE(none.may_exist());
  EXPECT_FALSE(removed.may_exist());
  EXPECT_TRUE(placed.may_exist());
}

TEST(CgroupRecord, RefusesWhatItDidNotWrite) {
  for (const char* bad : {
           R"({})",
           R"({"state":"gone"})",
           R"({"state":1})",
           R"({"state":"none"})",
           R"({"state":"placed"})",
           R"({"state":"placed","name":"../x","memory_max":1,"cpu_max":"max","pids_max":1})",
           R"({"state":"placed","name":"","memory_max":1,"cpu_max":"max","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":-1,"cpu_max":"max","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":"1","cpu_max":"max","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":1,"cpu_max":"100000","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":1,"cpu_max":"1/2/3","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":1,"cpu_max":"x/1","pids_max":1})",
           R"({"state":"placed","name":"a","memory_max":1,"cpu_max":"max"})",
           R"({"state":"creating","name":"a","reason":7})",
       }) {
    auto v = boost::json::parse(bad);
    EXPECT_FALSE(parse_cgroup_record(v.as_object()).ok()) << bad;
  }
}

TEST(CgroupRecord, AMissingOrBrokenFileIsNoCgroupWithTheReason) {
  testing::TempDir dir("cgrec");
  CgroupRecord r = read_cgroup_record(dir.path());
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("no cgroup record"), std::string::npos);
  std::ofstream(dir.path() + "/cgroup.json") << R"({"state":"placed","name":"a/b"})";
  r = read_cgroup_record(dir.path());
  EXPECT_EQ(r.state, CgroupRecord::State::kNone);
  EXPECT_NE(r.reason.find("unreadable"), std::string::npos);
  EXPECT_FALSE(r.may_exist());
}

TEST(CgroupLeftovers, ListsValidNamesOnly) {
  testing::TempDir dir("cgleft");
  CgroupLeftovers l(dir.path() + "/leftovers");
  EXPECT_TRUE(l.names().empty());  // no folder yet
  ASSERT_TRUE(l.add("b").ok());
  ASSERT_TRUE(l.add("a").ok());
  ASSERT_TRUE(l.add("a").ok());  // twice is once
  EXPECT_FALSE(l.add("../x").ok());
  EXPECT_FALSE(l.add(".hidden").ok());
  EXPECT_FALSE(l.add("").ok());
  ::mkdir((l.dir() + "/c").c_str(), 0700);  // not a file: not a name
  std::ofstream(l.dir() + "/.tmp") << "";
  EXPECT_EQ(l.names(), (std::vector<std::string>{"a", "b"}));
  struct stat st {};
  ASSERT_EQ(::stat(l.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  l.drop("a");
  l.drop("../b");  // refused: nothing outside is touched
  EXPECT_EQ(l.names(), (std::vector<std::string>{"b"}));
}

TEST(SweepCgroups, DeletesSkipsLiveRetriesBusyKeepsRefused) {
  testing::TempDir dir("cgsweep");
  CgroupLeftovers l(dir.path() + "/leftovers");
  for (const char* n : {"a-gone", "b-ok", "c-busy", "d-live", "e-refused"}) ASSERT_TRUE(l.add(n).ok());
  ScriptedHelper h;
  h.removes = {refused(ErrorCode::kNotFound), Answer{}, refused(ErrorCode::kBusy),
               refused(ErrorCode::kSystem)};
  SweepResult r = sweep_cgroups(h, l, [](const std::string& n) { return n == "d-live"; });
  EXPECT_EQ(h.calls,
            (std::vector<std::string>{"delete a-gone", "delete b-ok", "delete c-busy", "delete e-refused"}));
  EXPECT_EQ(r.deleted, (std::vector<std::string>{"a-gone", "b-ok"}));
  EXPECT_EQ(r.busy, (std::vector<std::string>{"c-busy"}));
  ASSERT_EQ(r.kept.size(), 1u);
  EXPECT_EQ(r.kept[0].rfind("e-refused: ", 0), 0u);
  EXPECT_FALSE(r.done());
  EXPECT_EQ(l.names(), (std::vector<std::string>{"c-busy", "d-live", "e-refused"}));
}

TEST(SweepCgroups, AHelperThatGoesAwayEndsThePassKeepingEverything) {
  testing::TempDir dir("cgsweep");
  CgroupLeftovers l(dir.path() + "/leftovers");
  for (const char* n : {"a", "b"}) ASSERT_TRUE(l.add(n).ok());
  ScriptedHelper h;
  h.removes = {gone()};
  SweepResult r = sweep_cgroups(h, l, [](const std::string&) { return false; });
  EXPECT_EQ(h.calls, (std::vector<std::string>{"delete a"}));
  EXPECT_TRUE(r.done());
  EXPECT_EQ(l.names(), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace abox::engine
