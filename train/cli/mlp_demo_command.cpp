#include <cstdio>
#include <memory>

#include "core/parallel.h"
#include "train/cli/commands.h"
#include "train/mlp_demo.h"

namespace shamn::cli {

void register_mlp_demo(CLI::App& app) {
  auto options = std::make_shared<MlpDemoOptions>();
  auto log_every = std::make_shared<int64_t>(100);
  CLI::App* cmd = app.add_subcommand(
      "mlp-demo", "train a small MLP on a nonlinear regression target (autograd + AdamW demo)");
  cmd->add_option("--steps", options->steps, "training steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", options->batch, "examples per step")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", options->hidden, "hidden width")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--lr", options->lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--seed", options->seed, "random seed")->capture_default_str();
  cmd->add_option("--log-every", *log_every, "print every N steps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([options, log_every] {
    std::printf("mlp-demo: hidden %lld, batch %lld, %lld steps, %d threads\n",
                static_cast<long long>(options->hidden), static_cast<long long>(options->batch),
                static_cast<long long>(options->steps), num_threads());
    const MlpDemoResult r = run_mlp_demo(*options, [&](int64_t step, double loss, double lr,
                                                       double norm) {
      if ((step + 1) % *log_every == 0 || step == 0 || step + 1 == options->steps)
        std::printf("step %6lld  loss %.6f  lr %.2e  grad_norm %.3f\n",
                    static_cast<long long>(step + 1), loss, lr, norm);
    });
    const double examples = static_cast<double>(options->steps * options->batch);
    std::printf(
        "held-out mse %.6f (target variance %.4f, best linear fit %.4f), %.2f s, %.0f "
        "examples/s\n",
        r.eval_mse, r.target_variance, r.linear_mse, r.seconds, examples / r.seconds);
  });
}

}  // namespace shamn::cli
