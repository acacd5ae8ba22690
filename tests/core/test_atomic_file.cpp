#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/atomic_file.h"
#include "core/check.h"
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

}  // namespace shamn
