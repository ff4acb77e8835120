// The kernel command line's abox.* options.
#include "guest/box_guest/kernel_cmdline.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace abox::guest {
namespace {

TEST(KernelCmdline, FindsTheOptionAmongOthers) {
  const std::string line = "console=ttyS0 quiet abox.ctl=control panic=-1 tsc_early_khz=2000000\n";
  EXPECT_EQ(cmdline_option(line, "ctl", "ctl"), "control");
  EXPECT_EQ(cmdline_option(line, "other", "fallback"), "fallback");
}

TEST(KernelCmdline, LastWinsAndPrefixesAreNotMatches) {
  EXPECT_EQ(cmdline_option("abox.ctl=a abox.ctl=b", "ctl", "x"), "b");
  EXPECT_EQ(cmdline_option("abox.ctlx=a xabox.ctl=b abox.ctl", "ctl", "x"), "x");
  EXPECT_EQ(cmdline_option("abox.ctl=", "ctl", "x"), "");
  EXPECT_EQ(cmdline_option("\tabox.ctl=tab\n", "ctl", "x"), "tab");
  EXPECT_EQ(cmdline_option("", "ctl", "ctl"), "ctl");
}

TEST(KernelCmdline, ReadsAtMost4KiB) {
  abox::testing::TempDir dir("cmdline");
  const std::string path = dir.path() + "/cmdline";
  std::ofstream(path) << std::string(5000, 'x') << " abox.ctl=late";
  auto text = read_kernel_cmdline(path.c_str());
  EXPECT_EQ(text.size(), 4096u);
  EXPECT_EQ(cmdline_option(text, "ctl", "ctl"), "ctl");
  EXPECT_EQ(read_kernel_cmdline((dir.path() + "/missing").c_str()), "");
}

}  // namespace
}  // namespace abox::guest
