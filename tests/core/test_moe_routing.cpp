// Expert selection, the MoE dispatch plan and combine kernels (core/kernels/moe_routing.h), which
// training (autograd/ops_moe.cpp) and the inference runtime share.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

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

namespace {

// The obvious tree routing: sort all groups, then all their experts, by
// (value descending, index ascending) and take the front.
std::vector<int32_t> select_experts_by_sorting(const std::vector<float>& pg, const std::vector<float>& P,
                                               int64_t n, const MoeShape& s) {
  const int64_t G = s.groups, E = s.experts_per_group, X = s.experts();
  std::vector<int32_t> out;
  for (int64_t t = 0; t < n; ++t) {
    auto by = [&](const float* v) {
      return [v](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    };
    std::vector<int64_t> groups(G), cand;
    for (int64_t g = 0; g < G; ++g) groups[g] = g;
    std::sort(groups.begin(), groups.end(), by(pg.data() + t * G));
    for (int64_t i = 0; i < s.group_k; ++i)
      for (int64_t j = 0; j < E; ++j) cand.push_back(groups[i] * E + j);
    std::sort(cand.begin(), cand.end(), by(P.data() + t * X));
    for (int64_t i = 0; i < s.k; ++i) out.push_back(static_cast<int32_t>(cand[i]));
  }
  return out;
}

}  // namespace

TEST_CASE("select_experts picks what sorting picks, ties to the lower index", "[moe][kernels]") {
  // Values from a handful of levels, so most tokens have ties among groups and experts.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 3);
  for (const MoeShape s :
       {MoeShape{4, 4, 1, 2}, MoeShape{4, 4, 2, 3}, MoeShape{3, 5, 3, 15}, MoeShape{1, 6, 1, 1}}) {
    const int64_t n = 200;
    std::vector<float> pg(n * s.groups), P(n * s.experts());
    for (float& v : pg) v = 0.25f * static_cast<float>(level(rng));
    for (float& v : P) v = 0.125f * static_cast<float>(level(rng));
    std::vector<int32_t> got(n * s.k);
    select_experts(got.data(), pg.data(), P.data(), n, s);
    CHECK(got == select_experts_by_sorting(pg, P, n, s));
  }
}
