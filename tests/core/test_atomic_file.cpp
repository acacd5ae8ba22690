#include <catch2/catch.hpp>

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
  // More files at once than the registry holds: the rest are not registered, no harm.
  std::vector<std::unique_ptr<TempFileRegistration>> many;
  for (int i = 0; i < 100; ++i)
    many.push_back(std::make_unique<TempFileRegistration>((dir / "n").string() + std::to_string(i)));
  const TempFileRegistration too_long(std::string(5000, 'x'));
  remove_registered_temp_files();
  CHECK(entries(dir) == 2);
  std::filesystem::remove_all(dir);
}

}  // namespace shamn
