// dropout (autograd/ops_dropout.h): its gradient by finite differences, the
// rate and scale of its masks, and masks that depend on the key and the
// element alone (not on the thread count).
#include <cmath>

#include "autograd/ops.h"
#include "autograd/ops_dropout.h"
#include "core/parallel.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("gradcheck: dropout", "[autograd][gradcheck][dropout]") {
  // 4,099 elements: several of the op's chunks and a last Philox block cut short.
  const Tensor x = test::random_tensor({29, 141}, 5);
  test::check_gradients([](const std::vector<Var>& v) { return dropout(v[0], 0.3, {7, 11}); }, {x});
}

TEST_CASE("dropout's gradient is written when it comes first and added when another op's came first",
          "[autograd][dropout]") {
  // x's gradient is 2 (from 2x) plus dropout's mask and scale; the op created
  // last runs its backward first, so the two orders take both paths.
  const Tensor x = test::random_tensor({37, 113}, 3, DType::f32);
  const Tensor mask = dropout(Var(Tensor::full({37, 113}, 1.0, DType::f32)), 0.4, {5, 6}).value();
  for (bool dropout_first : {true, false}) {
    INFO("dropout's backward runs " << (dropout_first ? "first" : "second"));
    Var in(x.clone(), true);
    const Var two(Tensor::full({37, 113}, 2.0, DType::f32));
    Var scaled, dropped;
    if (dropout_first) {
      scaled = mul(in, two);
      dropped = dropout(in, 0.4, {5, 6});
    } else {
      dropped = dropout(in, 0.4, {5, 6});
      scaled = mul(in, two);
    }
    sum(add(scaled, dropped)).backward();
    const Tensor g = in.grad();
    for (int64_t i = 0; i < x.numel(); ++i)
      REQUIRE(g.item(i) == static_cast<double>(static_cast<float>(mask.item(i)) + 2.0f));
  }
  test::check_gradients(
      [](const std::vector<Var>& v) {
        return add(dropout(v[0], 0.3, {7, 11}), mul(v[0], v[0]));
      },
      {test::random_tensor({5, 70}, 9)});
}

TEST_CASE("dropout keeps an element with probability 1 - p and scales it by 1 / (1 - p)",
          "[autograd][dropout]") {
  const int64_t n = 200'003;
  for (double p : {0.05, 0.1, 0.5, 0.9}) {
    INFO("p = " << p);
    const Tensor out = dropout(Var(Tensor::full({n}, 1.0)), p, {3, 9}).value();
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keeps = dropout_keeps(p, {3, 9}, static_cast<uint64_t>(i));
      REQUIRE(out.item(i) == (keeps ? static_cast<double>(static_cast<float>(1.0 / (1.0 - p))) : 0.0));
      kept += keeps ? 1 : 0;
    }
    // Within 5 standard deviations of n (1 - p); fixed key, so the count is too.
    const double sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
    CHECK(std::abs(static_cast<double>(kept) - static_cast<double>(n) * (1 - p)) < 5 * sd);
  }
}

TEST_CASE(
    "dropout's mask is a function of its key and the element: other keys, other masks, any thread count",
    "[autograd][dropout]") {
  const Tensor x = test::random_tensor({64, 300}, 8, DType::f32);
  const test::ThreadCountGuard restore;
  const auto run = [&](DropoutKey key, int threads) {
    set_num_threads(threads);
    Var in(x.clone(), true);
    const Var y = dropout(in, 0.25, key);
    sum(mul(y, Var(x))).backward();
    return std::make_pair(y.value(), in.grad());
  };
  const auto [y1, g1] = run({1, 2}, 1);
  const auto [y2, g2] = run({1, 2}, 2);
  CHECK(bitwise_equal(y1, y2));
  CHECK(bitwise_equal(g1, g2));
  CHECK_FALSE(bitwise_equal(y1, run({1, 3}, 2).first));  // another stream
  CHECK_FALSE(bitwise_equal(y1, run({2, 2}, 2).first));  // another seed
  // The gradient is the output's mask and scale applied to dy (here x itself;
  // equal values, though a dropped element's zero may differ in sign).
  CHECK(test::max_abs_diff(g1, y1) == 0);
}

TEST_CASE("dropout at p = 0 is x itself, and p below 0 or from 1 up is refused", "[autograd][dropout]") {
  const Var x(test::random_tensor({3, 4}, 1, DType::f32), true);
  CHECK(dropout(x, 0.0, {1, 1}).value().data<float>() == x.value().data<float>());
  CHECK_THROWS_WITH(dropout(x, 1.0, {1, 1}), Catch::Contains("p must lie in [0, 1), got 1"));
  CHECK_THROWS_WITH(dropout(x, -0.1, {1, 1}), Catch::Contains("p must lie in [0, 1)"));
}
