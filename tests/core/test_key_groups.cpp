// The parallel counting sort of scatter-adds against std::stable_sort, and the
// row scatter-add built on it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/kernels/key_groups.h"
#include "core/kernels/rows.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "helpers.h"

using namespace shamn;

namespace {

// Entries sorted by key, stable, the left-out ones (key < 0) dropped.
std::vector<int64_t> stable_reference(const std::vector<int64_t>& keys) {
  std::vector<int64_t> order;
  for (int64_t e = 0; e < static_cast<int64_t>(keys.size()); ++e)
    if (keys[static_cast<size_t>(e)] >= 0) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
  });
  return order;
}

}  // namespace

TEST_CASE("group_by_key is the stable counting sort at any thread count", "[core][key_groups]") {
  test::ThreadCountGuard guard;
  // One block, several blocks with a short last one, and more groups than entries.
  const std::pair<int64_t, int64_t> shapes[] = {
      {1000, 37}, {3 * kKeyGroupBlock + 123, 1000}, {5000, 70000}, {0, 5}};
  for (const auto& [entries, groups] : shapes) {
    Rng rng(static_cast<uint64_t>(entries + groups), 11);
    std::vector<int64_t> keys(static_cast<size_t>(entries));
    // Skewed keys (many in group 0) and about one entry in ten left out.
    for (int64_t& k : keys)
      k = rng.below(10) == 0 ? -1
                             : static_cast<int64_t>(rng.below(static_cast<uint64_t>(groups)) * rng.below(2));
    const std::vector<int64_t> want = stable_reference(keys);
    for (int threads : {1, 2, 8}) {
      INFO("entries " << entries << " groups " << groups << " threads " << threads);
      set_num_threads(threads);
      const KeyGroups got =
          group_by_key(entries, groups, [&](int64_t e) { return keys[static_cast<size_t>(e)]; });
      REQUIRE(got.start.size() == static_cast<size_t>(groups) + 1);
      REQUIRE(got.start.back() == static_cast<int64_t>(want.size()));
      CHECK(std::vector<int64_t>(got.order.data(), got.order.data() + got.order.size()) == want);
      std::vector<int64_t> sizes(static_cast<size_t>(groups), 0);
      for (int64_t k : keys)
        if (k >= 0) ++sizes[static_cast<size_t>(k)];
      bool starts_match = true;
      for (int64_t g = 0; g < groups; ++g)
        starts_match =
            starts_match && got.start[static_cast<size_t>(g) + 1] - got.start[static_cast<size_t>(g)] ==
                                sizes[static_cast<size_t>(g)];
      CHECK(starts_match);
    }
  }
}

TEST_CASE("scatter_add_rows with overwrite writes over garbage what adding into zeros gives",
          "[kernels][determinism]") {
  // 300 source rows into 97 destinations, some named many times and some never
  // (those must come out zero); a few sources are -0, whose sum with a zeroed
  // row is +0 either way.
  test::ThreadCountGuard guard;
  const int64_t n = 300, rows = 97, dim = 40;
  Rng rng(7, 1);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int32_t& i : idx) i = static_cast<int32_t>(rng.below(static_cast<uint64_t>(rows - 10)));
  std::vector<float> src = test::uniform_floats(n * dim, 8);
  for (int64_t i = 0; i < n * dim; i += 7) src[static_cast<size_t>(i)] = -0.0f;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> want(static_cast<size_t>(rows * dim), 0.0f);
    scatter_add_rows(want.data(), src.data(), idx.data(), n, rows, dim);
    std::vector<float> got = test::uniform_floats(rows * dim, 9);  // garbage
    std::vector<float> kept = got;
    scatter_add_rows(got.data(), src.data(), idx.data(), n, rows, dim, /*overwrite=*/true);
    scatter_add_rows(kept.data(), src.data(), idx.data(), n, rows, dim);
    CHECK(test::same_bits(got, want));
    CHECK_FALSE(test::same_bits(kept, want));  // without overwrite the garbage stays
  }
}
