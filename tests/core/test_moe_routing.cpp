// The MoE dispatch plan and combine kernels (core/kernels/moe_routing.h), which
// training (autograd/ops_moe.cpp) and the inference runtime share.
#include <catch2/catch.hpp>

#include "core/kernels/moe_routing.h"

using namespace shamn;

TEST_CASE("moe_dispatch_plan groups each expert's tokens in token order", "[moe][kernels]") {
  // 4 tokens, k = 2, 3 experts; expert 1 is never chosen.
  const std::vector<int32_t> experts = {2, 0, 0, 2, 2, 0, 0, 2};
  const int64_t n = 4, k = 2, X = 3;
  std::vector<int32_t> order(n * k), row(n * k);
  std::vector<int64_t> offsets(X + 1);
  moe_dispatch_plan(order.data(), row.data(), offsets.data(), experts.data(), n, k, X);
  CHECK(offsets == std::vector<int64_t>{0, 4, 4, 8});
  CHECK(order == std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3});
  // Every (token, slot) has its own row, inside its expert's block, holding its token.
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = row[t * k + i], e = experts[t * k + i];
      CHECK(order[r] == t);
      CHECK(r >= offsets[e]);
      CHECK(r < offsets[e + 1]);
    }
  CHECK(row == std::vector<int32_t>{4, 0, 1, 5, 6, 2, 3, 7});
}

TEST_CASE("moe_dispatch_plan names an expert id outside the experts", "[moe][kernels][errors]") {
  const std::vector<int32_t> experts = {0, 3};
  std::vector<int32_t> order(2), row(2);
  std::vector<int64_t> offsets(4);
  CHECK_THROWS_WITH(moe_dispatch_plan(order.data(), row.data(), offsets.data(), experts.data(), 1, 2, 3),
                    Catch::Contains("expert id 3 out of range [0, 3)"));
}

TEST_CASE("moe_combine_forward sums gated rows in slot order, or adds them to out", "[moe][kernels]") {
  // 2 tokens, k = 2, D = 2; rows in plan order.
  const std::vector<float> ys = {1, 2, 10, 20, 100, 200, 1000, 2000};
  const std::vector<int32_t> row = {3, 0, 1, 2};
  const std::vector<float> gates = {0.5f, 0.25f, 2, 4};
  std::vector<float> out(4, -1.0f);
  moe_combine_forward(out.data(), gates.data(), ys.data(), row.data(), 2, 2, 2, /*accumulate=*/false);
  CHECK(out == std::vector<float>{0.5f * 1000 + 0.25f * 1, 0.5f * 2000 + 0.25f * 2, 2 * 10 + 4 * 100.0f,
                                  2 * 20 + 4 * 200.0f});
  std::vector<float> acc = {1, 1, 1, 1};
  moe_combine_forward(acc.data(), gates.data(), ys.data(), row.data(), 2, 2, 2, /*accumulate=*/true);
  CHECK(acc == std::vector<float>{1 + 500 + 0.25f, 1 + 1000 + 0.5f, 1 + 20 + 400.0f, 1 + 40 + 800.0f});
}
