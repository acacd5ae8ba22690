#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/temp_file_cleanup.h"
#include "tests/scratch_dir.h"

extern char** environ;

namespace shamn {
namespace {

std::filesystem::path fresh_dir() { return test::scratch_dir("atomic"); }

std::string contents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t entries(const std::filesystem::path& dir) {
  return static_cast<size_t>(
      std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()));
}

}  // namespace

TEST_CASE("AtomicFile shows the new file only after commit()", "[core][atomic_file]") {
  const auto dir = fresh_dir();
  const auto path = dir / "out.bin";
  std::ofstream(path) << "old";
  {
    AtomicFile file(path.string(), "text");
    file.write("new", 3);
    CHECK(contents(path) == "old");
    CHECK(std::filesystem::exists(file.temp_path()));
    CHECK(std::filesystem::path(file.temp_path()).parent_path() == dir);
    file.commit();
    CHECK(contents(path) == "new");
    CHECK_THROWS_AS(file.commit(), Error);
  }
  CHECK(entries(dir) == 1);
  {
    AtomicFile file(path.string(), "text");
    file.write("abandoned", 9);
  }  // no commit(): the old file stays, the temporary file goes
  CHECK(contents(path) == "new");
  CHECK(entries(dir) == 1);
  const std::string bad = (dir / "missing" / "x.bin").string();
  CHECK_THROWS_AS(AtomicFile(bad, "text"), InputError);
  CHECK_THROWS_WITH(AtomicFile(bad, "text"), Catch::Contains("'" + bad + "'"));
  std::filesystem::remove_all(dir);
}

// What a stop signal's handler does (tests/train/fault_injection.sh sends the
// signals): the files being written go, the finished ones and the rest stay.
TEST_CASE("remove_registered_temp_files removes the files in flight only", "[core][atomic_file]") {
  const auto dir = fresh_dir();
  const auto done = dir / "done.bin", other = dir / "other.bin";
  std::ofstream(other) << "not ours";
  {
    AtomicFile finished(done.string(), "text");
    finished.write("whole", 5);
    finished.commit();
    AtomicFile in_flight((dir / "half.bin").string(), "text");
    in_flight.write("ha", 2);
    const std::string linked = temp_path_for((dir / "link.bin").string());
    std::ofstream(linked) << "a link's temporary name";
    const TempFileRegistration registration(linked);
    {
      const std::string ended = temp_path_for((dir / "ended.bin").string());
      std::ofstream(ended) << "x";
      { const TempFileRegistration gone(ended); }
      CHECK(entries(dir) == 5);
      remove_registered_temp_files();
      CHECK(std::filesystem::exists(ended));  // its registration had ended
      std::filesystem::remove(ended);
    }
    CHECK_FALSE(std::filesystem::exists(in_flight.temp_path()));
    CHECK_FALSE(std::filesystem::exists(linked));
  }
  CHECK(contents(done) == "whole");
  CHECK(contents(other) == "not ours");
  CHECK(entries(dir) == 2);
  // More files at once than the registry holds: the first kTempFileSlots go, the
  // rest are left (to the orphan sweep); a path too long is not registered.
  std::vector<std::unique_ptr<TempFileRegistration>> many;
  for (int i = 0; i < 100; ++i) {
    const std::string name = (dir / "n").string() + std::to_string(i);
    std::ofstream(name) << i;
    many.push_back(std::make_unique<TempFileRegistration>(name));
  }
  const TempFileRegistration too_long(std::string(5000, 'x'));
  remove_registered_temp_files();
  CHECK(entries(dir) == 2 + 100 - kTempFileSlots);
  CHECK_FALSE(std::filesystem::exists((dir / "n0").string()));
  CHECK(std::filesystem::exists((dir / "n99").string()));
  std::filesystem::remove_all(dir);
}

// A registered child (gnuplot drawing a picture) is killed and reaped before
// the files are removed, so it cannot write them again afterwards.
TEST_CASE("remove_registered_temp_files kills the registered children first", "[core][atomic_file]") {
  pid_t pid = 0;
  const char* argv[] = {"sleep", "600", nullptr};
  REQUIRE(posix_spawnp(&pid, "sleep", nullptr, nullptr, const_cast<char* const*>(argv), environ) == 0);
  {
    const ChildRegistration child(pid);
    remove_registered_temp_files();
  }
  errno = 0;
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // already reaped: no such child
  CHECK(errno == ECHILD);
}

}  // namespace shamn
