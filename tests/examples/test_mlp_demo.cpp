// End to end: an MLP built from the autograd ops and trained with AdamW fits a
// nonlinear target.
#include <catch2/catch.hpp>

#include "examples/mlp_demo/mlp_demo.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("a small MLP fits a nonlinear target", "[train][e2e]") {
  MlpDemoOptions options;
  options.steps = 600;
  const MlpDemoResult r = run_mlp_demo(options);
  // The bound: the best linear model leaves most of the variance unexplained
  // (the target has sin*cos and product terms); a working MLP must cut that
  // residual by 20x or more. At init the loss is about the target variance.
  INFO("eval mse " << r.eval_mse << ", linear " << r.linear_mse << ", variance " << r.target_variance);
  CHECK(r.linear_mse > 0.5 * r.target_variance);
  CHECK(r.eval_mse < 0.05 * r.linear_mse);
  CHECK(r.train_loss.back() < 0.1 * r.train_loss.front());
}

TEST_CASE("MLP training is bit-identical with 1 and 2 threads", "[train][determinism]") {
  test::ThreadCountGuard guard;
  MlpDemoOptions options;
  options.steps = 30;
  options.warmup_steps = 5;
  set_num_threads(1);
  const MlpDemoResult one = run_mlp_demo(options);
  set_num_threads(2);
  const MlpDemoResult two = run_mlp_demo(options);
  CHECK(one.train_loss == two.train_loss);
  CHECK(one.eval_mse == two.eval_mse);
}

TEST_CASE("an MLP run shorter than its warm-up warms up over all its steps", "[train]") {
  MlpDemoOptions options;
  options.steps = 10;  // warmup_steps stays 50
  options.eval_examples = 64;
  const MlpDemoResult r = run_mlp_demo(options);
  CHECK(r.train_loss.size() == 10);
}
