// Children from a typed spec, held by pidfds: exactly the fds and the
// environment given, a failed exec reported as an error, death seen on the
// io_context, and no child left behind by an owner that goes away.
#include "engine/process/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "engine/process/child_watch.h"
#include "engine/process/pipe_reader.h"

namespace abox::engine {
namespace {

std::string read_all(base::UniqueFd fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

ChildSpec shell(const std::string& script, int out_fd) {
  ChildSpec s;
  s.program = "/bin/sh";
  s.argv = {"sh", "-c", script};
  s.env = {"ONLY=this", "PATH=/usr/bin:/bin"};
  s.fds = {{1, out_fd}};
  return s;
}

TEST(ChildProcess, ExactEnvironmentAndOnlyTheGivenFds) {
  auto out = make_pipe();
  // An fd of ours that must not reach the child (it is not close-on-exec).
  int stray = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(stray, 0);
  // test(1) is a shell builtin: it looks at the fds without opening one.
  std::string script =
      "env; for fd in 0 2 " + std::to_string(stray) +
      "; do test -e /proc/$$/fd/$fd && echo has-$fd; done; test -e /proc/$$/fd/1 && echo has-1";
  auto spec = shell(script, out.write.get());
  auto child = ChildProcess::spawn(spec);
  ASSERT_TRUE(child.ok()) << child.error();
  out.write.reset();
  std::string text = read_all(std::move(out.read));
  EXPECT_NE(text.find("ONLY=this\n"), std::string::npos);
  EXPECT_EQ(text.find("HOME="), std::string::npos);
  EXPECT_NE(text.find("has-1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("has-0\n"), std::string::npos) << text;  // not given: closed
  EXPECT_EQ(text.find("has-2\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("has-" + std::to_string(stray) + "\n"), std::string::npos) << text;
  auto status = child->wait();
  EXPECT_FALSE(status.signalled);
  EXPECT_EQ(status.value, 0);
  EXPECT_GT(child->start_ticks(), 0u);
  ::close(stray);
}

TEST(ChildProcess, FdsMayBeSwappedWithoutClobbering) {
  auto a = make_pipe();
  auto b = make_pipe();
  ChildSpec s;
  s.program = "/bin/sh";
  s.argv = {"sh", "-c", "echo to-a >&3; echo to-b >&4"};
  s.env = {"PATH=/bin"};
  // The child's 3 is our b, its 4 our a: whichever order dup2 runs in, nothing is lost.
  s.fds = {{3, a.write.get()}, {4, b.write.get()}};
  auto child = ChildProcess::spawn(s);
  ASSERT_TRUE(child.ok());
  a.write.reset();
  b.write.reset();
  EXPECT_EQ(read_all(std::move(a.read)), "to-a\n");
  EXPECT_EQ(read_all(std::move(b.read)), "to-b\n");
  child->wait();
}

TEST(ChildProcess, AFailedExecIsAnErrorNotAChild) {
  ChildSpec s;
  s.program = "/nonexistent/program";
  s.argv = {"program"};
  auto child = ChildProcess::spawn(s);
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.error().find("No such file or directory"), std::string::npos);
  s.program = "relative";
  EXPECT_FALSE(ChildProcess::spawn(s).ok());
}

TEST(ChildProcess, DeathIsSeenOnTheLoopWithItsStatus) {
  boost::asio::io_context io;
  auto null = open_dev_null();
  auto spec = shell("exit 7", null.get());
  auto child = ChildProcess::spawn(spec);
  ASSERT_TRUE(child.ok());
  std::optional<ExitStatus> seen;
  ChildWatch watch(io, *child, [&](const ExitStatus& s) { seen = s; });
  io.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->value, 7);
  EXPECT_EQ(seen->describe(), "exited with status 7");
  EXPECT_EQ(seen->shell_code(), 7);

  auto sleeper = ChildProcess::spawn(shell("sleep 60", null.get()));
  ASSERT_TRUE(sleeper.ok());
  std::optional<ExitStatus> killed;
  ChildWatch watch2(io, *sleeper, [&](const ExitStatus& s) { killed = s; });
  EXPECT_TRUE(sleeper->signal(SIGTERM));
  io.restart();
  io.run_for(std::chrono::seconds(10));
  ASSERT_TRUE(killed);
  EXPECT_TRUE(killed->signalled);
  EXPECT_EQ(killed->value, SIGTERM);
  EXPECT_EQ(killed->shell_code(), 128 + SIGTERM);
  EXPECT_EQ(killed->describe(), "killed by signal 15 (SIGTERM)");
  EXPECT_FALSE(sleeper->signal(SIGTERM));  // reaped: nothing to signal
}

TEST(ChildProcess, AnOwnerThatGoesAwayLeavesNoChild) {
  auto null = open_dev_null();
  pid_t pid = 0;
  {
    auto child = ChildProcess::spawn(shell("sleep 60", null.get()));
    ASSERT_TRUE(child.ok());
    pid = child->pid();
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  // Killed and reaped by the destructor: the pid is gone, not a zombie.
  EXPECT_NE(::kill(pid, 0), 0);
}

TEST(LineSplitter, CutsLongLinesAndKeepsTheRest) {
  std::vector<std::string> lines;
  LineSplitter s(8, [&](std::string_view l) { lines.emplace_back(l); });
  std::string input = "ready x\n0123456789abcdef\nshort\npartial";
  s.feed(std::span(reinterpret_cast<const std::uint8_t*>(input.data()), input.size()));
  s.finish();
  EXPECT_EQ(lines, (std::vector<std::string>{"ready x", "01234567", "short", "partial"}));
  EXPECT_EQ(s.lines_cut(), 1u);
}

TEST(TailLog, CapsTheFileAndKeepsTheTail) {
  char tmpl[] = "/tmp/tail_log-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    TailLog log(tmpl, 10, 4);
    std::string a = "0123456", b = "789abcdef";
    log.write(std::span(reinterpret_cast<const std::uint8_t*>(a.data()), a.size()));
    log.write(std::span(reinterpret_cast<const std::uint8_t*>(b.data()), b.size()));
    EXPECT_EQ(log.tail(), "cdef");
    EXPECT_EQ(log.dropped_bytes(), 6u);
  }
  base::UniqueFd in(::open(tmpl, O_RDONLY));
  EXPECT_EQ(read_all(std::move(in)), "0123456789");
  ::unlink(tmpl);
}

}  // namespace
}  // namespace abox::engine
