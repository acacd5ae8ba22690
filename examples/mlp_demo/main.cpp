// A small MLP trained on a nonlinear regression target with shamn's autograd and
// AdamW: the library used directly, without the model or the trainer.
//   build/examples/mlp_demo [--threads N] [--steps 1500] [--seed 1]
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "core/check.h"
#include "core/parallel.h"
#include "examples/mlp_demo/mlp_demo.h"

int main(int argc, char** argv) {
  using namespace shamn;
  MlpDemoOptions options;
  int64_t log_every = 100;
  int threads = 0;
  CLI::App app{"mlp_demo: train a small MLP on a nonlinear regression target (autograd + AdamW)"};
  app.add_option("--threads", threads, "worker threads (default: every core)")->check(CLI::PositiveNumber);
  app.add_option("--steps", options.steps, "training steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "examples per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--hidden", options.hidden, "hidden width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", options.lr, "peak learning rate")->capture_default_str();
  app.add_option("--seed", options.seed, "random seed")
      ->capture_default_str()
      ->check(CLI::Validator(  // "-1" would parse as 2^64 - 1
          [](std::string& v) {
            return v.starts_with('-') ? "must be a whole number >= 0, got '" + v + "'" : "";
          },
          "SEED"));
  app.add_option("--log-every", log_every, "print every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mlp_demo: error: " << e.what() << "\n";
    return 1;
  }
  if (threads > 0) set_num_threads(threads);
  try {
    std::printf("mlp_demo: hidden %lld, batch %lld, %lld steps, %d threads\n",
                static_cast<long long>(options.hidden), static_cast<long long>(options.batch),
                static_cast<long long>(options.steps), num_threads());
    const MlpDemoResult r = run_mlp_demo(options, [&](int64_t step, double loss, double lr, double norm) {
      if ((step + 1) % log_every == 0 || step == 0 || step + 1 == options.steps)
        std::printf("step %6lld  loss %.6f  lr %.2e  grad_norm %.3f\n", static_cast<long long>(step + 1),
                    loss, lr, norm);
    });
    const double examples = static_cast<double>(options.steps * options.batch);
    std::printf(
        "held-out mse %.6f (target variance %.4f, best linear fit %.4f), %.2f s, %.0f "
        "examples/s\n",
        r.eval_mse, r.target_variance, r.linear_mse, r.seconds, examples / r.seconds);
  } catch (const Error& e) {
    std::cerr << "mlp_demo: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
