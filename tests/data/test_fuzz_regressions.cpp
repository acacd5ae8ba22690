// Inputs that the token file and tokenizer fuzz targets (tests/fuzz/), or a
// review of what they parse, found to crash, hang or allocate without bound
// before the fix. Each must now be a clean InputError with a message that names
// the file. The files live in tests/fuzz/regressions/<target>/ so that
// tests/fuzz/ci_smoke.sh also replays them under the sanitizers; every file
// there must be listed here.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/check.h"
#include "data/tokenizer.h"
#include "tests/fuzz/regression_files.h"

namespace shamn {

using test::fuzz_regressions;
using test::Regression;
using test::require_all_listed;

TEST_CASE("tokenizer files that once crashed or exhausted memory are clean InputErrors",
          "[fuzz][tokenizer]") {
  const std::vector<Regression> cases = {
      // 40 merges each joining the previous token with itself: 2^40 bytes.
      {"doubling_merges.txt", ":9: merge 6 (261 261) makes a token of 128 bytes"},
      // 3 lines claiming 16M merges: no 128 MB reservation before the file runs out.
      {"huge_vocab_claim.txt", "file ends after 1 merges, but vocab_size 16777216"},
  };
  require_all_listed("tokenizer_file", cases);
  for (const Regression& c : cases) {
    const std::string path = (fuzz_regressions("tokenizer_file") / c.file).string();
    INFO(path);
    CHECK_THROWS_AS(Tokenizer::load(path), InputError);
    CHECK_THROWS_WITH(Tokenizer::load(path), Catch::Contains(path) && Catch::Contains(c.needle));
  }
}

}  // namespace shamn
