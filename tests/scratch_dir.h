#pragma once
// Where the unit tests write files: one directory per test process,
// $TMPDIR/shamn_test_<pid> (or /tmp), removed when the process exits normally.
// CTest runs each case as its own process beside whole-suite runs at a forced
// kernel level (tests/CMakeLists.txt), so a fixed path such as
// /tmp/shamn_test_prepare would be shared by two processes at once; and
// per-process directories nobody removes pile up, run after run.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace shamn::test {

// A directory this process owns: emptied and created now (a crashed run's, whose
// pid came round again, goes), removed with the owner. A forked child that
// exits through exit() rather than _exit() leaves it to its parent.
class OwnedDir {
 public:
  explicit OwnedDir(std::filesystem::path dir) : dir_(std::move(dir)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~OwnedDir() {
    if (::getpid() != owner_) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  OwnedDir(const OwnedDir&) = delete;
  OwnedDir& operator=(const OwnedDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  pid_t owner_ = ::getpid();
  std::filesystem::path dir_;
};

// Created on first use, removed with the process's other statics (not by an
// atexit handler registered while the static is built: that one would run after
// the static's destructor and read a destroyed path).
inline const std::filesystem::path& scratch_root() {
  static const OwnedDir root(std::filesystem::temp_directory_path() /
                             ("shamn_test_" + std::to_string(::getpid())));
  return root.path();
}

// scratch_root() / name, emptied and created: `name` may hold '/' for nesting.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir = scratch_root() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace shamn::test
