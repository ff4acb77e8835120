// ABOX_NEEDS_ROOT(why): the first line of a test (or SetUp) that needs root
// (network namespaces, taps, capabilities, another uid). Not root: the test
// is skipped, saying why, on a developer's machine, and FAILS where every
// test must run: in CI (the CI variable set, as CI services and .ci/run set
// it) or with ABOX_ROOT_TESTS=required. CI runs as root; a CI that stopped
// being root would otherwise pass with the data path's namespace tests
// silently skipped.
//
// A test that is root but lacks what it needs (no /dev/net/tun, no netns)
// is not skipped by this: it fails where it tries.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace abox::testing {

// Must every test run here (a missing privilege is then a failure)?
inline bool root_tests_required() {
  const char* mode = std::getenv("ABOX_ROOT_TESTS");
  if (mode != nullptr && std::string_view(mode) == "required") return true;
  if (mode != nullptr && std::string_view(mode) == "optional") return false;
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string_view v(ci);
  return !v.empty() && v != "0" && v != "false";
}

}  // namespace abox::testing

// A statement (GTEST_SKIP() and FAIL() return from the enclosing function).
#define ABOX_NEEDS_ROOT(why)                                                                                \
  do {                                                                                                      \
    if (::geteuid() != 0) {                                                                                 \
      if (::abox::testing::root_tests_required())                                                           \
        FAIL() << "not root, and this run must run every test (CI or ABOX_ROOT_TESTS=required): " << (why); \
      GTEST_SKIP() << (why);                                                                                \
    }                                                                                                       \
  } while (0)
