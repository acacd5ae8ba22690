// Finite-difference gradient checks of the MoE router ops (autograd/ops_moe.h),
// router_probs and moe_gates, on their own and chained as HierarchicalMoE chains
// them, in double and in float (test::check_gradients). The chained cases have
// k < experts_per_group and group_k > 1, so the selected experts of a token span
// several groups and its gates depend on the group router, not only on the
// expert router (with group_k = 1 pg[g] cancels from P[e] / sum_selected P).
#include <algorithm>
#include <numeric>
#include <tuple>

#include "autograd/ops.h"
#include "autograd/ops_moe.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::random_tensor;

namespace {

// SPEC 1.6's tree routing from the logits, in plain loops: the top group_k groups
// by pg, then the top k experts by P among theirs (ties to the lower index).
// int32 [N, k], held constant in the checks (selection is piecewise constant;
// the f32 check's eps of 1e-2 must not move it). `groups_spanned` counts the
// tokens whose experts lie in more than one group.
Tensor route(const Tensor& rg, const Tensor& re, const MoeShape& s, int64_t* groups_spanned) {
  const int64_t n = rg.size(0), G = s.groups, E = s.experts_per_group;
  Tensor experts = Tensor::empty({n, s.k}, DType::i32);
  *groups_spanned = 0;
  for (int64_t t = 0; t < n; ++t) {
    auto softmax = [](std::vector<double> v) {
      const double m = *std::max_element(v.begin(), v.end());
      double z = 0;
      for (double& x : v) z += (x = std::exp(x - m));
      for (double& x : v) x /= z;
      return v;
    };
    std::vector<double> lg(G), P(G * E);
    for (int64_t g = 0; g < G; ++g) lg[g] = rg.item(t * G + g);
    const std::vector<double> pg = softmax(lg);
    for (int64_t g = 0; g < G; ++g) {
      std::vector<double> le(E);
      for (int64_t j = 0; j < E; ++j) le[j] = re.item(t * G * E + g * E + j);
      const std::vector<double> pe = softmax(le);
      for (int64_t j = 0; j < E; ++j) P[g * E + j] = pg[g] * pe[j];
    }
    std::vector<int64_t> order(G);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pg[a] > pg[b]; });
    std::vector<int64_t> cand;
    for (int64_t i = 0; i < s.group_k; ++i)
      for (int64_t j = 0; j < E; ++j) cand.push_back(order[i] * E + j);
    std::sort(cand.begin(), cand.end());
    std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t b) { return P[a] > P[b]; });
    for (int64_t i = 0; i < s.k; ++i) experts.set_item(t * s.k + i, static_cast<double>(cand[i]));
    bool spans = false;
    for (int64_t i = 1; i < s.k; ++i) spans |= cand[i] / E != cand[0] / E;
    *groups_spanned += spans;
  }
  return experts;
}

}  // namespace

TEST_CASE("gradcheck: router_probs", "[autograd][gradcheck][moe]") {
  // G x E: several groups of several experts, one group, one expert per group.
  for (auto [G, E] : {std::pair<int64_t, int64_t>{3, 4}, {1, 5}, {4, 1}, {2, 3}}) {
    DYNAMIC_SECTION("G " << G << " E " << E) {
      const MoeShape shape{G, E, 1, 1};
      check_gradients(
          [shape](const std::vector<Var>& x) { return router_probs(x[0], x[1], shape); },
          {random_tensor({5, G}, 1, DType::f64, -2, 2), random_tensor({5, G * E}, 2, DType::f64, -2, 2)});
    }
  }
}

TEST_CASE("gradcheck: moe_gates on its own, experts from any group in any order",
          "[autograd][gradcheck][moe]") {
  // P > 0 as router_probs makes it; rows of distinct experts, not sorted.
  const Tensor experts = Tensor::from_data<int32_t>({4, 3}, {5, 0, 2, 1, 7, 3, 6, 4, 0, 2, 3, 7});
  check_gradients([experts](const std::vector<Var>& x) { return moe_gates(x[0], experts); },
                  {random_tensor({4, 8}, 3, DType::f64, 0.05, 1)});
  // k = 1: the gate is 1 whatever P is, and its gradient 0.
  const Tensor one = Tensor::from_data<int32_t>({3, 1}, {4, 0, 7});
  check_gradients([one](const std::vector<Var>& x) { return moe_gates(x[0], one); },
                  {random_tensor({3, 8}, 4, DType::f64, 0.05, 1)});
}

TEST_CASE("gradcheck: moe_gates(router_probs) with k < experts_per_group and group_k > 1",
          "[autograd][gradcheck][moe]") {
  // (G, E, group_k, k): k < E and group_k > 1 throughout; the last keeps every group.
  for (auto [G, E, group_k, k] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 4, 2, 3}, {4, 3, 3, 2}, {2, 5, 2, 4}}) {
    DYNAMIC_SECTION("G " << G << " E " << E << " group_k " << group_k << " k " << k) {
      const MoeShape shape{G, E, group_k, k};
      const int64_t n = 9;
      // Logits in [-1, 1]: the groups' probabilities are comparable, so a token's top
      // k often spans two groups.
      const Tensor rg = random_tensor({n, G}, 5 + G, DType::f64);
      const Tensor re = random_tensor({n, G * E}, 6 + E, DType::f64);
      int64_t spanned = 0;
      const Tensor experts = route(rg, re, shape, &spanned);
      INFO(spanned << " of " << n << " tokens have experts in more than one group");
      CHECK(spanned >= 2);  // else d gates / d rg would be 0 and the check vacuous for rg
      check_gradients(
          [shape, experts](const std::vector<Var>& x) {
            return moe_gates(router_probs(x[0], x[1], shape), experts);
          },
          {rg, re});
      // The joint P and the gates together, as the layer uses them (P also feeds aux).
      check_gradients(
          [shape, experts](const std::vector<Var>& x) {
            const Var P = router_probs(x[0], x[1], shape);
            return concat_last({P, moe_gates(P, experts)});
          },
          {rg, re});
    }
  }
}
