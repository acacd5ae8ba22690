#include "examples/mlp_demo/mlp_demo.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "autograd/ops.h"
#include "core/rng.h"
#include "core/timing.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_schedule.h"

namespace shamn {
namespace {

constexpr int64_t kInputs = 4;

struct Batch {
  Tensor x;  // [n, 4]
  Tensor y;  // [n, 1]
};

Batch make_batch(Rng& rng, int64_t n) {
  Batch b{Tensor::empty({n, kInputs}), Tensor::empty({n, 1})};
  rng.fill_uniform(b.x, -1.0, 1.0);
  for (int64_t i = 0; i < n; ++i)
    b.y.data<float>()[i] = static_cast<float>(mlp_demo_target(b.x.data<float>() + i * kInputs));
  return b;
}

Var linear_init(Rng& rng, int64_t out, int64_t in) {
  Tensor w = Tensor::empty({out, in});
  rng.fill_normal(w, 0.0, 1.0 / std::sqrt(static_cast<double>(in)));
  return Var(w, true);
}

struct Mlp {
  std::vector<NamedVar> params;
  Var w1, b1, w2, b2, w3, b3;

  Mlp(Rng& rng, int64_t hidden)
      : w1(linear_init(rng, hidden, kInputs)),
        b1(Var(Tensor::zeros({hidden}), true)),
        w2(linear_init(rng, hidden, hidden)),
        b2(Var(Tensor::zeros({hidden}), true)),
        w3(linear_init(rng, 1, hidden)),
        b3(Var(Tensor::zeros({1}), true)) {
    params = {{"fc1.weight", w1}, {"fc1.bias", b1},   {"fc2.weight", w2},
              {"fc2.bias", b2},   {"out.weight", w3}, {"out.bias", b3}};
  }

  Var forward(const Var& x) const {
    Var h = gelu(add(matmul(x, w1, false, true), b1));
    h = gelu(add(matmul(h, w2, false, true), b2));
    return add(matmul(h, w3, false, true), b3);
  }
};

Var mse(const Var& pred, const Var& target) {
  Var diff = sub(pred, target);
  return mean(mul(diff, diff));
}

double least_squares_linear_mse(const Batch& b) {
  const int64_t n = b.x.size(0);
  Eigen::MatrixXd a(n, kInputs + 1);
  Eigen::VectorXd y(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < kInputs; ++j) a(i, j) = b.x.data<float>()[i * kInputs + j];
    a(i, kInputs) = 1.0;
    y(i) = b.y.data<float>()[i];
  }
  const Eigen::VectorXd coef = a.colPivHouseholderQr().solve(y);
  return (a * coef - y).squaredNorm() / static_cast<double>(n);
}

}  // namespace

double mlp_demo_target(const float* x) {
  return std::sin(3.0 * x[0]) * std::cos(2.0 * x[1]) + x[2] * x[3] - 0.5 * x[2] * x[2];
}

MlpDemoResult run_mlp_demo(const MlpDemoOptions& options,
                           const std::function<void(int64_t, double, double, double)>& on_step) {
  const Stopwatch clock;
  Rng init_rng(options.seed, 0), data_rng(options.seed, 1), eval_rng(options.seed, 2);
  Mlp model(init_rng, options.hidden);
  AdamW opt(split_weight_decay(model.params, options.weight_decay));
  LrSchedule schedule{options.lr, options.min_lr, std::min(options.warmup_steps, options.steps),
                      options.steps};
  schedule.validate();

  MlpDemoResult result;
  for (int64_t step = 0; step < options.steps; ++step) {
    Batch b = make_batch(data_rng, options.batch);
    Var loss = mse(model.forward(Var(b.x)), Var(b.y));
    opt.zero_grad();
    loss.backward();
    const double norm = clip_grad_norm(model.params, options.grad_clip);
    const double lr = schedule.at(step);
    opt.step(lr);
    result.train_loss.push_back(loss.value().item());
    if (on_step) on_step(step, result.train_loss.back(), lr, norm);
  }

  Batch eval = make_batch(eval_rng, options.eval_examples);
  {
    NoGradGuard no_grad;
    result.eval_mse = mse(model.forward(Var(eval.x)), Var(eval.y)).value().item();
  }
  result.linear_mse = least_squares_linear_mse(eval);
  const auto y = eval.y.vector<float>().cast<double>();
  result.target_variance = (y.array() - y.mean()).square().mean();
  result.seconds = clock.seconds();
  return result;
}

}  // namespace shamn
