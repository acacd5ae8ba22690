// The fault hook (core/fault.h) and what the atomic writer does when a fault
// strikes: the spec's syntax, pass counting, byte offsets, and the file left
// behind (the old one, untouched; no temporary file).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"
#include "tests/scratch_dir.h"

namespace shamn {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) { return test::scratch_dir("fault_" + name); }

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

struct Disarm {
  ~Disarm() { fault::set_for_testing(""); }
};

// A pid that belonged to a process which has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("SHAMN_FAULT specs: sites, counts and actions are checked", "[core][fault]") {
  const Disarm disarm;
  CHECK_NOTHROW(fault::set_for_testing("checkpoint.tensor:3"));
  CHECK(fault::armed());
  CHECK_NOTHROW(fault::set_for_testing("tokens.bytes:0:enospc,metrics.append:2:eio,best.link:1:kill"));
  CHECK_THROWS_WITH(fault::set_for_testing("checkpoint.tensr:3"),
                    Catch::Contains("SHAMN_FAULT: unknown site 'checkpoint.tensr'"));
  CHECK_THROWS_WITH(fault::set_for_testing("nokind.fsync:1"), Catch::Contains("unknown site"));
  // Sites that could never be reached: HDF5 files count datasets, the others bytes.
  CHECK_THROWS_WITH(fault::set_for_testing("checkpoint.bytes:10"), Catch::Contains("unknown site"));
  CHECK_THROWS_WITH(fault::set_for_testing("tokens.tensor:1"), Catch::Contains("unknown site"));
  CHECK_NOTHROW(fault::set_for_testing("model.tensor:1,grads.dirsync:1,result.bytes:3,text.rename:2"));
  CHECK_THROWS_WITH(fault::set_for_testing("text.fsync"), Catch::Contains("is not <site>:<n>"));
  CHECK_THROWS_WITH(fault::set_for_testing("text.fsync:x"),
                    Catch::Contains("'x' is not a non-negative integer"));
  CHECK_THROWS_WITH(fault::set_for_testing("text.fsync:-1"), Catch::Contains("not a non-negative integer"));
  CHECK_THROWS_WITH(fault::set_for_testing("text.fsync:+1"), Catch::Contains("not a non-negative integer"));
  // Passes count from 1: a count of 0 is a byte offset's only.
  CHECK_THROWS_WITH(fault::set_for_testing("model.fsync:0:eio"), Catch::Contains("a count of 0 would never"));
  CHECK_THROWS_WITH(fault::set_for_testing("text.fsync:1:explode"),
                    Catch::Contains("unknown action 'explode'"));
  fault::set_for_testing("");
  CHECK_FALSE(fault::armed());
  CHECK(fault::pass("text.fsync") == 0);
}

TEST_CASE("a fault strikes at the n-th pass through its site, once", "[core][fault]") {
  const Disarm disarm;
  fault::set_for_testing("text.fsync:2:enospc,text.rename:1:eio");
  CHECK(fault::pass("text.fsync") == 0);
  CHECK(fault::pass("text.rename") == EIO);
  CHECK(fault::pass("text.fsync") == ENOSPC);
  CHECK(fault::pass("text.fsync") == 0);
  CHECK(fault::pass("text.rename") == 0);
  CHECK(fault::pass("shq.fsync") == 0);
}

TEST_CASE("a failed fsync or rename keeps the old file and leaves no temporary file",
          "[core][fault][atomic_file]") {
  const Disarm disarm;
  const auto dir = fresh_dir("commit");
  const auto path = dir / "out.txt";
  write_file_atomically(path.string(), "old");
  for (const char* spec : {"text.fsync:1:enospc", "text.rename:1:eio"}) {
    fault::set_for_testing(spec);
    CHECK_THROWS_WITH(
        write_file_atomically(path.string(), "new"),
        Catch::Contains(path.string()) &&
            Catch::Contains(std::string(spec).find("enospc") != std::string::npos ? "No space left on device"
                                                                                  : "Input/output error"));
    CHECK(contents(path) == "old");
    CHECK(entries(dir) == 1);
  }
  // A failed directory fsync is not an error: the file is whole under its name.
  fault::set_for_testing("text.dirsync:1:eio");
  write_file_atomically(path.string(), "new");
  CHECK(contents(path) == "new");
  fs::remove_all(dir);
}

TEST_CASE("a byte-offset fault lets exactly n bytes through", "[core][fault][atomic_file]") {
  const Disarm disarm;
  const auto dir = fresh_dir("bytes");
  const auto path = dir / "out.bin";
  for (uint64_t n : {0, 3, 5, 7, 10}) {
    fault::set_for_testing("tokens.bytes:" + std::to_string(n) + ":enospc");
    AtomicFile file(path.string(), "tokens");
    // n == 5 and n == 10 fall exactly at the end of a write: it fails after it.
    CHECK_THROWS_WITH((file.write("01234", 5), file.write("56789", 5)),
                      Catch::Contains("failed after " + std::to_string(n) + " bytes"));
    CHECK(contents(file.temp_path()) == std::string("0123456789").substr(0, n));
  }
  CHECK(entries(dir) == 0);
  // Of two offsets on one site the earlier strikes, whichever is listed first.
  fault::set_for_testing("tokens.bytes:7:eio,tokens.bytes:3:enospc");
  {
    AtomicFile file(path.string(), "tokens");
    CHECK_THROWS_WITH(file.write("0123456789", 10),
                      Catch::Contains("failed after 3 bytes") && Catch::Contains("No space left on device"));
  }
  fs::remove_all(dir);
}

TEST_CASE("an abandoned write after a byte fault leaves the old file", "[core][fault][atomic_file]") {
  const Disarm disarm;
  const auto dir = fresh_dir("partial");
  const auto path = dir / "out.bin";
  write_file_atomically(path.string(), "old contents", "tokens");
  fault::set_for_testing("tokens.bytes:4:enospc");
  std::string temp;
  try {
    AtomicFile file(path.string(), "tokens");
    temp = file.temp_path();
    file.write("new contents", 12);
    FAIL("the write should have failed");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("failed after 4 bytes: No space left on device"));
  }
  CHECK_FALSE(fs::exists(temp));
  CHECK(contents(path) == "old contents");
  CHECK(entries(dir) == 1);
  fs::remove_all(dir);
}

TEST_CASE("a writer removes the temporary files of dead writers of the same name only",
          "[core][atomic_file]") {
  const auto dir = fresh_dir("orphans");
  const auto path = dir / "model.shq";
  const fs::path dead = dir / (".model.shq.tmp." + std::to_string(dead_pid()));
  const fs::path alive = dir / ".model.shq.tmp.1";  // pid 1 always runs
  const fs::path other = dir / (".other.bin.tmp." + std::to_string(dead_pid()));
  for (const fs::path& p : {dead, alive, other}) std::ofstream(p) << "partial";
  write_file_atomically(path.string(), "whole");
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));
  CHECK(fs::exists(other));
  CHECK(contents(path) == "whole");
  fs::remove_all(dir);
}

}  // namespace shamn
