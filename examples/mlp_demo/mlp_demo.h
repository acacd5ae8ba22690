#pragma once
// A two-hidden-layer MLP regressing a nonlinear function of 4 inputs, trained with
// AdamW from the autograd ops: how to use the library without the SHAMN model or
// the trainer (examples/mlp_demo/main.cpp is its command line).
#include <cstdint>
#include <functional>
#include <vector>

namespace shamn {

struct MlpDemoOptions {
  int64_t hidden = 64;
  int64_t batch = 256;
  int64_t steps = 1500;
  int64_t eval_examples = 4096;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 50;  // at most steps: a shorter run warms up over all of it
  double weight_decay = 1e-4;
  double grad_clip = 1.0;
  uint64_t seed = 1;
};

struct MlpDemoResult {
  std::vector<double> train_loss;  // per step
  double eval_mse = 0;             // held-out examples, after training
  double linear_mse = 0;           // best least-squares linear fit on the same examples
  double target_variance = 0;
  double seconds = 0;
};

// target(x) = sin(3 x0) cos(2 x1) + x2 x3 - 0.5 x2^2 with x uniform in [-1, 1]^4.
double mlp_demo_target(const float* x);

// on_step(step, loss, lr, grad_norm) is called after every step (may be empty).
MlpDemoResult run_mlp_demo(const MlpDemoOptions& options,
                           const std::function<void(int64_t, double, double, double)>& on_step = {});

}  // namespace shamn
