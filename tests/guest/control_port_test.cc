// Finding the control port without udev, in a sysfs and /dev made in a temp
// dir: the name match, the wait, and its bound.
#include "guest/box_guest/control_port.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "guest/box_guest/console.h"
#include "tests/support/temp_dir.h"

namespace abox::guest {
namespace {

struct FakeSysfs {
  abox::testing::TempDir dir{"vport"};
  ControlPortPaths paths{dir.path() + "/class", dir.path() + "/dev"};
  FakeSysfs() {
    ::mkdir(paths.class_dir.c_str(), 0755);
    ::mkdir(paths.dev_dir.c_str(), 0755);
  }
  void port(const std::string& entry, const std::string& name_file, bool device = true) {
    ::mkdir((paths.class_dir + "/" + entry).c_str(), 0755);
    std::ofstream(paths.class_dir + "/" + entry + "/name") << name_file;
    if (device) std::ofstream(paths.dev_dir + "/" + entry) << "";
  }
};

TEST(ControlPort, FindsThePortByItsName) {
  FakeSysfs fs;
  fs.port("vport0p0", "");
  fs.port("vport0p1", "org.qemu.guest_agent.0\n");
  fs.port("vport0p2", "ctl\n");
  EXPECT_EQ(find_virtio_port(fs.paths.class_dir, "ctl"), "vport0p2");
  EXPECT_EQ(find_virtio_port(fs.paths.class_dir, "org.qemu.guest_agent.0"), "vport0p1");
  EXPECT_FALSE(find_virtio_port(fs.paths.class_dir, "ct"));
  EXPECT_FALSE(find_virtio_port(fs.paths.class_dir, "ctl\n"));
  EXPECT_FALSE(find_virtio_port(fs.paths.class_dir + "/nothing", "ctl"));
}

TEST(ControlPort, NameWithoutNewlineAndOverlongNames) {
  FakeSysfs fs;
  fs.port("vport1p1", "ctl");
  fs.port("vport1p2", std::string(300, 'x'));
  EXPECT_EQ(find_virtio_port(fs.paths.class_dir, "ctl"), "vport1p1");
  EXPECT_FALSE(find_virtio_port(fs.paths.class_dir, std::string(300, 'x')))
      << "names are read up to 256 bytes";
}

TEST(ControlPort, OpensTheDeviceOfTheNamedPort) {
  FakeSysfs fs;
  fs.port("vport0p1", "other\n");
  fs.port("vport0p3", "ctl\n");
  auto fd = open_control_port("ctl", 1000, fs.paths);
  ASSERT_TRUE(fd.ok()) << fd.error();
  EXPECT_TRUE(fd->valid());
}

TEST(ControlPort, GivesUpAfterTheWaitWithWhatWasMissing) {
  FakeSysfs fs;
  fs.port("vport0p1", "other\n");
  const auto start = monotonic_ms();
  auto fd = open_control_port("ctl", 100, fs.paths);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().find("no virtio port named ctl"), std::string::npos) << fd.error();
  EXPECT_GE(monotonic_ms() - start, 100);

  fs.port("vport0p2", "ctl\n", /*device=*/false);  // named, but devtmpfs has no node yet
  fd = open_control_port("ctl", 100, fs.paths);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().find("open "), std::string::npos) << fd.error();
}

}  // namespace
}  // namespace abox::guest
