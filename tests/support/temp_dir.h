// TempDir: a private directory (mode 0700, from mkdtemp) for one test, made
// under $TMPDIR or /tmp and removed with everything in it when the TempDir
// goes, so a test that stops half-way leaves nothing behind.
//
// Invariants: path() exists and is this object's alone from construction to
// destruction (or until it is moved from; a moved-from TempDir owns nothing).
// A directory that cannot be made throws, with the template and errno's
// text: a constructor cannot ASSERT, and GoogleTest reports an exception from
// a test or its fixture's constructor as that test's failure and runs none
// of its body, so no test goes on to write to a path that does not exist.
// A directory that cannot be removed fails the test that owned it.
//
// Unix socket paths are limited to 107 bytes: keep prefixes and file names
// short (with /tmp, "/tmp/<prefix>-XXXXXX/<name>").
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace abox::testing {

class TempDir {
 public:
  // `prefix` names the test in the directory's name: <tmp>/<prefix>-XXXXXX.
  explicit TempDir(std::string_view prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    pattern += "/";
    pattern += prefix;
    pattern += "-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    if (::mkdtemp(name.data()) == nullptr) {
      throw std::runtime_error("cannot make a temporary directory " + pattern + ": " + std::strerror(errno));
    }
    path_ = name.data();
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code error;
    std::filesystem::remove_all(path_, error);
    if (error) ADD_FAILURE() << "cannot remove the temporary directory " << path_ << ": " << error.message();
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory (which this does not create).
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace abox::testing
