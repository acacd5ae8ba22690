#pragma once
// For the Catch2 cases that replay fixed fuzz findings (tests/*/test_fuzz_regressions.cpp):
// where a target's inputs live, and a check that each one has a case.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace shamn::test {

inline std::filesystem::path fuzz_regressions(const std::string& target) {
  return std::filesystem::path(SHAMN_SOURCE_DIR) / "tests" / "fuzz" / "regressions" / target;
}

struct Regression {
  std::string file;    // under tests/fuzz/regressions/<target>/
  std::string needle;  // part of the expected message
};

// Every file of the target's directory has a case, so a new regression is not forgotten.
inline void require_all_listed(const std::string& target, const std::vector<Regression>& cases) {
  std::set<std::string> listed;
  for (const Regression& c : cases) listed.insert(c.file);
  for (const auto& entry : std::filesystem::directory_iterator(fuzz_regressions(target))) {
    INFO(entry.path());
    CHECK(listed.count(entry.path().filename().string()) == 1);
  }
}

}  // namespace shamn::test
