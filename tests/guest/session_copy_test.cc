// Files in and out of a session (copy_in, copy_out) with the host's own tar
// as the image's: a tree lands owned by the command's user with its modes
// and symlinks; members that try to leave the folder do not; the folder is
// made as the user (so one the user could not make is an error, not a
// root-owned folder); the port is not read while tar has not taken a frame
// (the host's writes wait); a copy_out's stream never passes the copy
// credit, comes whole, and flows beside the command's output; what cannot
// be copied says why. Real children as uid 1000 over SessionRig: run as
// root (skipped otherwise).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "tests/guest/session_rig.h"
#include "tests/support/needs_root.h"
#include "tests/support/temp_dir.h"

namespace abox::guest {
namespace {

using namespace abox::guest::testing;

// ---- a small ustar writer and reader: the test's own, so a stream can hold
// what no honest tar would write ----

struct Member {
  std::string name;
  char type = '0';  // '0' file, '5' directory, '2' symlink
  unsigned mode = 0644;
  std::string data;  // a file's bytes, or a symlink's target
};

// width - 1 octal digits and a NUL, as ustar wants.
void octal(char* field, std::size_t width, std::uint64_t value) {
  field[width - 1] = '\0';
  for (std::size_t i = width - 1; i-- > 0; value >>= 3) field[i] = static_cast<char>('0' + (value & 7));
}

std::vector<std::uint8_t> make_tar(const std::vector<Member>& members) {
  std::vector<std::uint8_t> out;
  for (const auto& m : members) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", m.name.c_str());
    octal(h + 100, 8, m.mode);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, m.type == '0' ? m.data.size() : 0);
    octal(h + 136, 12, 0);
    h[156] = m.type;
    if (m.type == '2') std::snprintf(h + 157, 100, "%s", m.data.c_str());
    std::memcpy(h + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    octal(h + 148, 7, sum);  // six digits, a NUL, and the space already there
    out.insert(out.end(), h, h + 512);
    if (m.type == '0') {
      out.insert(out.end(), m.data.begin(), m.data.end());
      out.resize((out.size() + 511) / 512 * 512, 0);
    }
  }
  out.resize(out.size() + 1024, 0);
  return out;
}

// name -> (type, size); stops at the end blocks. Plain ustar and GNU long
// names ('L') are all this test's streams hold.
std::map<std::string, std::pair<char, std::uint64_t>> list_tar(const std::vector<std::uint8_t>& tar) {
  std::map<std::string, std::pair<char, std::uint64_t>> names;
  std::string long_name;
  for (std::size_t at = 0; at + 512 <= tar.size();) {
    const char* h = reinterpret_cast<const char*>(tar.data() + at);
    if (h[0] == '\0') break;
    std::string name(h, strnlen(h, 100));
    const std::uint64_t size = std::strtoull(std::string(h + 124, 12).c_str(), nullptr, 8);
    const char type = h[156];
    at += 512;
    if (type == 'L') {
      long_name.assign(reinterpret_cast<const char*>(tar.data() + at),
                       strnlen(reinterpret_cast<const char*>(tar.data() + at), size));
    } else {
      if (!long_name.empty()) name = std::exchange(long_name, "");
      names[name] = {type, size};
    }
    at += (size + 511) / 512 * 512;
  }
  return names;
}

void send_copy_in(SessionRig& rig, const std::string& path, const std::vector<std::uint8_t>& tar,
                  std::size_t chunk = kMaxPayload) {
  std::vector<std::uint8_t> p;
  encode(CopyPath{path}, p);
  rig.send(HostMessage::kCopyIn, p);
  for (std::size_t at = 0; at < tar.size(); at += chunk)
    rig.send(HostMessage::kCopyData,
             std::vector<std::uint8_t>(
                 tar.begin() + static_cast<std::ptrdiff_t>(at),
                 tar.begin() + static_cast<std::ptrdiff_t>(std::min(tar.size(), at + chunk))));
  rig.send(HostMessage::kCopyEnd);
}

CopyResult expect_copy_in_done(SessionRig& rig) {
  auto r = decode_copy_result(rig.expect(GuestMessage::kCopyInDone).payload);
  if (!r) throw std::runtime_error("copy_in_done does not decode");
  return *r;
}

struct Stat {
  bool exists = false;
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t mode = 0;
  std::string link;
};
Stat stat_of(const std::string& path) {
  Stat s;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.uid = st.st_uid;
  s.gid = st.st_gid;
  s.mode = st.st_mode & 07777;
  if (S_ISLNK(st.st_mode)) {
    char buf[256];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    if (n > 0) s.link.assign(buf, static_cast<std::size_t>(n));
  }
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SessionCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    ABOX_NEEDS_ROOT("the copies run as uid 1000: needs root");
    ::chmod(dir_.path().c_str(), 0755);
    home_ = dir_.path() + "/home";
    ::mkdir(home_.c_str(), 0755);
    ASSERT_EQ(::chown(home_.c_str(), 1000, 1000), 0);
    rig_.expect(GuestMessage::kHello);
  }
  abox::testing::TempDir dir_{"copy"};
  std::string home_;
  SessionRig rig_;
};

TEST_F(SessionCopy, ATreeLandsOwnedByTheUserWithItsModesAndSymlinks) {
  rig_.send_setup(rig_.setup({"/bin/sh", "-c", "cat " + home_ + "/in/sub/hello"}));
  auto tar = make_tar({{"top", '5', 0755, ""},
                       {"top/run.sh", '0', 0755, "#!/bin/sh\necho run\n"},
                       {"top/secret", '0', 0600, "only me\n"},
                       {"sub", '5', 0750, ""},
                       {"sub/hello", '0', 0644, "hello from the host\n"},
                       {"top/link", '2', 0777, "../sub/hello"}});
  send_copy_in(rig_, home_ + "/in", tar, 700);  // many small frames
  auto done = expect_copy_in_done(rig_);
  EXPECT_TRUE(done.ok) << done.detail;

  const std::string in = home_ + "/in";
  for (const char* p : {"", "/top", "/top/run.sh", "/top/secret", "/sub", "/sub/hello", "/top/link"}) {
    Stat s = stat_of(in + p);
    ASSERT_TRUE(s.exists) << in + p;
    EXPECT_EQ(s.uid, 1000u) << in + p;
    EXPECT_EQ(s.gid, 1000u) << in + p;
  }
  EXPECT_EQ(stat_of(in + "/top/run.sh").mode, 0755u);
  EXPECT_EQ(stat_of(in + "/top/secret").mode, 0600u);
  EXPECT_EQ(stat_of(in + "/sub").mode, 0750u);
  EXPECT_EQ(stat_of(in + "/top/link").link, "../sub/hello");
  EXPECT_EQ(slurp(in + "/top/link"), "hello from the host\n");

  rig_.send(HostMessage::kGo);  // the command sees what was copied
  rig_.expect(GuestMessage::kStarted);
  auto o = collect(rig_, 1 << 20, 1 << 20);
  EXPECT_EQ(o.out, "hello from the host\n");
}

TEST_F(SessionCopy, MembersThatTryToLeaveTheFolderDoNot) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  const std::string outside = home_ + "/outside";
  auto tar = make_tar({{"../outside", '0', 0644, "escaped by ..\n"},
                       {home_ + "/absolute", '0', 0644, "escaped by an absolute path\n"},
                       {"ok", '0', 0644, "stayed\n"}});
  send_copy_in(rig_, home_ + "/in", tar);
  auto done = expect_copy_in_done(rig_);
  EXPECT_FALSE(stat_of(outside).exists) << "a member with ../ escaped: " << done.detail;
  EXPECT_FALSE(stat_of(home_ + "/absolute").exists) << "an absolute member escaped: " << done.detail;
  // What it did with them is tar's business; nothing landed outside the folder.
  DIR* d = ::opendir(home_.c_str());
  ASSERT_NE(d, nullptr);
  std::vector<std::string> entries;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.') entries.emplace_back(e->d_name);
  ::closedir(d);
  EXPECT_EQ(entries, std::vector<std::string>{"in"});
}

TEST_F(SessionCopy, TheFolderIsMadeAsTheUserSoOneTheUserCannotMakeIsAnError) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  const std::string closed = dir_.path() + "/root-only";
  ::mkdir(closed.c_str(), 0755);  // root's: uid 1000 cannot make anything in it
  send_copy_in(rig_, closed + "/in", make_tar({{"f", '0', 0644, "x"}}));
  auto done = expect_copy_in_done(rig_);
  EXPECT_FALSE(done.ok);
  EXPECT_EQ(done.detail, "cannot make or enter " + closed + "/in as uid 1000: Permission denied");
  EXPECT_FALSE(stat_of(closed + "/in").exists);
  // The session goes on: the next copy works.
  send_copy_in(rig_, home_ + "/a/b/c", make_tar({{"f", '0', 0644, "x"}}));
  done = expect_copy_in_done(rig_);
  EXPECT_TRUE(done.ok) << done.detail;
  EXPECT_EQ(stat_of(home_ + "/a/b").uid, 1000u);
  EXPECT_EQ(stat_of(home_ + "/a/b/c/f").uid, 1000u);
}

TEST_F(SessionCopy, AStreamTarRefusesIsNotOk) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  std::vector<std::uint8_t> garbage(300 * 1024, 'g');
  send_copy_in(rig_, home_ + "/in", garbage);
  auto done = expect_copy_in_done(rig_);
  EXPECT_FALSE(done.ok);
  EXPECT_NE(done.detail.find("tar"), std::string::npos) << done.detail;
  // Still a working session.
  rig_.send(HostMessage::kGo);
  rig_.expect(GuestMessage::kStarted);
  EXPECT_EQ(collect(rig_, 1 << 20, 1 << 20).exited->value, 0u);
}

TEST_F(SessionCopy, CopyInAfterGoIsRefused) {
  rig_.send_setup(rig_.setup({"/bin/sh", "-c", "sleep 1"}));
  rig_.send(HostMessage::kGo);
  rig_.expect(GuestMessage::kStarted);
  std::vector<std::uint8_t> p;
  encode(CopyPath{home_ + "/late"}, p);
  rig_.send(HostMessage::kCopyIn, p);
  auto done = expect_copy_in_done(rig_);
  EXPECT_FALSE(done.ok);
  EXPECT_EQ(done.detail, "copy_in while the command runs: only before go");
  EXPECT_FALSE(stat_of(home_ + "/late").exists);
}

// Pids of the processes named `comm` whose parent is `parent`.
std::vector<pid_t> children_named(pid_t parent, const std::string& comm) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  while (auto* e = d ? ::readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && stat.substr(open + 1, close - open - 1) == comm) found.push_back(pid);
  }
  if (d) ::closedir(d);
  return found;
}

TEST_F(SessionCopy, ThePortIsNotReadWhileTarHasNotTakenTheLastFrame) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  std::vector<std::uint8_t> p;
  encode(CopyPath{home_ + "/in"}, p);
  rig_.send(HostMessage::kCopyIn, p);
  // Stop tar: from now on the guest must stop reading the port.
  std::vector<pid_t> tars;
  for (int i = 0; i < 200 && tars.empty(); ++i) {
    ::usleep(10 * 1000);
    tars = children_named(rig_.session_pid(), "tar");
  }
  ASSERT_EQ(tars.size(), 1u);
  ASSERT_EQ(::kill(tars[0], SIGSTOP), 0);

  // 16 MiB of a file's content, written without blocking until the channel is full.
  const std::size_t file_size = 16 << 20;
  std::vector<Member> members = {{"big", '0', 0644, std::string(file_size, 'b')}};
  auto tar = make_tar(members);
  const int fd = rig_.host_fd();
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  FrameWriter& writer = rig_.writer();
  std::vector<std::uint8_t> wire;
  std::size_t queued = 0, written = 0;
  bool full = false;
  for (std::size_t at = 0; at < tar.size() && !full;) {
    if (written == wire.size()) {
      wire.clear();
      written = 0;
      const std::size_t n = std::min(kMaxPayload, tar.size() - at);
      writer.append(wire, static_cast<std::uint8_t>(HostMessage::kCopyData), std::span(tar.data() + at, n));
      at += n;
      queued += n;
    }
    ssize_t n = ::write(fd, wire.data() + written, wire.size() - written);
    if (n < 0 && errno == EAGAIN) {
      // Give a guest that reads on regardless every chance to show it.
      pollfd pf{fd, POLLOUT, 0};
      full = ::poll(&pf, 1, 500) == 0;
      continue;
    }
    ASSERT_GT(n, 0) << std::strerror(errno);
    written += static_cast<std::size_t>(n);
  }
  EXPECT_TRUE(full) << "the guest read all " << queued << " bytes while tar was stopped";
  EXPECT_LT(queued, std::size_t{8} << 20) << "the guest took far more than a frame and the socket's buffers";

  // Let tar go: everything arrives, whole.
  ::kill(tars[0], SIGCONT);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  rig_.write_all(std::vector<std::uint8_t>(wire.begin() + static_cast<std::ptrdiff_t>(written), wire.end()));
  std::size_t at = queued;
  while (at < tar.size()) {
    const std::size_t n = std::min(kMaxPayload, tar.size() - at);
    rig_.send(HostMessage::kCopyData,
              std::vector<std::uint8_t>(tar.begin() + static_cast<std::ptrdiff_t>(at),
                                        tar.begin() + static_cast<std::ptrdiff_t>(at + n)));
    at += n;
  }
  rig_.send(HostMessage::kCopyEnd);
  auto done = expect_copy_in_done(rig_);
  EXPECT_TRUE(done.ok) << done.detail;
  struct stat st {};
  ASSERT_EQ(::stat((home_ + "/in/big").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), file_size);
}

// ---- copy_out ----

struct CopyOutRun {
  std::vector<std::uint8_t> stream;
  std::optional<CopyResult> done;
  std::uint64_t most_outstanding = 0;
  std::string command_out;
  std::optional<Exited> exited;
};

// Sends copy_out and copy credit `step` at a time as the stream arrives;
// checks the guest never sends past it. Takes the command's output too.
CopyOutRun copy_out(SessionRig& rig, const std::string& path, std::uint32_t step, bool until_exited = false) {
  CopyOutRun run;
  std::vector<std::uint8_t> p;
  encode(CopyPath{path}, p);
  rig.send(HostMessage::kCopyOut, p);
  auto grant = [&](std::uint32_t n) {
    std::vector<std::uint8_t> c;
    encode(Credit{n}, c);
    rig.send(HostMessage::kCopyCredit, c);
  };
  grant(step);
  std::uint64_t outstanding = step;  // credit the guest holds
  while (!run.done || (until_exited && !run.exited)) {
    auto r = rig.next();
    if (!r) throw std::runtime_error("the session went quiet during a copy_out");
    switch (static_cast<GuestMessage>(r->type)) {
      case GuestMessage::kCopyOutData:
        if (r->payload.size() > outstanding) throw std::runtime_error("copy_out_data past the copy credit");
        outstanding -= r->payload.size();
        run.stream.insert(run.stream.end(), r->payload.begin(), r->payload.end());
        run.most_outstanding = std::max<std::uint64_t>(run.most_outstanding, r->payload.size());
        if (outstanding == 0) {
          grant(step);
          outstanding = step;
        }
        break;
      case GuestMessage::kCopyOutDone:
        run.done = decode_copy_result(r->payload);
        break;
      case GuestMessage::kStdout: {
        std::string chunk = stream_text(*r);
        run.command_out += chunk;
        rig.grant(kMainSession, static_cast<std::uint32_t>(chunk.size()));
        break;
      }
      case GuestMessage::kExited:
        run.exited = decode_exited(r->payload);
        break;
      default:
        throw std::runtime_error("unexpected " + std::string(guest_message_name(r->type)));
    }
  }
  return run;
}

TEST_F(SessionCopy, CopyOutOfAFolderUnderASmallCredit) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  send_copy_in(rig_, home_ + "/work",
               make_tar({{"a.txt", '0', 0644, std::string(100000, 'a')},
                         {"d", '5', 0755, ""},
                         {"d/b.bin", '0', 0600, std::string(3000, 'b')},
                         {"d/l", '2', 0777, "/etc/passwd"}}));
  ASSERT_TRUE(expect_copy_in_done(rig_).ok);
  auto run = copy_out(rig_, home_ + "/work/", 1000);
  ASSERT_TRUE(run.done);
  EXPECT_TRUE(run.done->ok) << run.done->detail;
  EXPECT_LE(run.most_outstanding, 1000u);
  auto names = list_tar(run.stream);
  EXPECT_EQ(names["work/"].first, '5');
  EXPECT_EQ(names["work/a.txt"], (std::pair<char, std::uint64_t>{'0', 100000}));
  EXPECT_EQ(names["work/d/b.bin"], (std::pair<char, std::uint64_t>{'0', 3000}));
  EXPECT_EQ(names["work/d/l"].first, '2') << "a symlink comes as a symlink, never followed";
  EXPECT_EQ(names.size(), 5u);
}

TEST_F(SessionCopy, CopyOutOfWhatTheUserCannotReadOrWhatIsNotThereSaysSo) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  const std::string closed = dir_.path() + "/closed";
  ::mkdir(closed.c_str(), 0700);  // root's
  auto run = copy_out(rig_, closed, 65536);
  ASSERT_TRUE(run.done);
  EXPECT_FALSE(run.done->ok);
  EXPECT_NE(run.done->detail.find("Permission denied"), std::string::npos) << run.done->detail;
  run = copy_out(rig_, home_ + "/missing", 65536);
  ASSERT_TRUE(run.done);
  EXPECT_FALSE(run.done->ok);
  EXPECT_NE(run.done->detail.find("No such file"), std::string::npos) << run.done->detail;
}

TEST_F(SessionCopy, CopyOutFlowsBesideTheCommandsOutputAndAfterItExited) {
  rig_.send_setup(
      rig_.setup({"/bin/sh", "-c", "seq 1 20000 >" + home_ + "/made; echo made; sleep 1; echo bye"}));
  rig_.send(HostMessage::kGo);
  rig_.expect(GuestMessage::kStarted);
  auto r = rig_.next();
  ASSERT_TRUE(r);
  ASSERT_EQ(stream_text(*r), "made\n");
  auto during = copy_out(rig_, home_ + "/made", 4096, /*until_exited=*/true);
  EXPECT_TRUE(during.done->ok) << during.done->detail;
  EXPECT_EQ(during.command_out, "bye\n");
  EXPECT_EQ(list_tar(during.stream)["made"].second, 108894u);  // seq 1 20000 | wc -c
  // After the command: still served until poweroff.
  auto after = copy_out(rig_, home_ + "/made", 1 << 20);
  EXPECT_TRUE(after.done->ok) << after.done->detail;
  EXPECT_EQ(after.stream, during.stream);
}

TEST_F(SessionCopy, CopyDataOrCreditWithNothingOpenIsLoggedAndIgnored) {
  rig_.send_setup(rig_.setup({"/bin/true"}));
  rig_.send(HostMessage::kCopyData, {1, 2, 3});
  rig_.send(HostMessage::kCopyEnd);
  std::vector<std::uint8_t> c;
  encode(Credit{100}, c);
  rig_.send(HostMessage::kCopyCredit, c);
  rig_.send(HostMessage::kGo);
  rig_.expect(GuestMessage::kStarted);
  collect(rig_, 1 << 20, 1 << 20);
  for (const char* line :
       {"copy_data with no copy_in open: dropped", "copy_end with no copy_in open: ignored",
        "copy_credit with no copy_out open: ignored"})
    EXPECT_NE(std::find(rig_.logs.begin(), rig_.logs.end(), line), rig_.logs.end()) << line;
}

}  // namespace
}  // namespace abox::guest
