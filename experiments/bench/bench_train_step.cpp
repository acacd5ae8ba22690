// End-to-end training-step benchmark: forward, backward, grad clipping and AdamW
// on a model config with random tokens, timed per step; prints one JSON line per
// thread count with the median tokens/s and the median split of a step.
//   bench_train_step CONFIG.toml [--batch 8] [--seq 512] [--steps 5] [--warmup 1] [--threads 1,2]
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config_table.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/timing.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"

using namespace shamn;
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s CONFIG.toml [--batch B] [--seq T] [--steps S] [--warmup W] [--threads 1,2]\n",
                 argv[0]);
    return 2;
  }
  int64_t batch = 8, seq = 512, steps = 5, warmup = 1;
  std::vector<int> threads{1, 2};
  for (int i = 2; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "option %s has no value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[i + 1];
    if (k == "--batch")
      batch = std::stoll(v);
    else if (k == "--seq")
      seq = std::stoll(v);
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--warmup")
      warmup = std::stoll(v);
    else if (k == "--threads") {
      threads.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) threads.push_back(std::stoi(t));
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (batch < 1 || seq < 1 || steps < 1 || warmup < 0) {
    std::fprintf(stderr, "--batch, --seq and --steps must be >= 1 and --warmup >= 0\n");
    return 2;
  }
  try {
    const ModelConfig config = ModelConfig::from_table(ConfigTable::parse_file(argv[1]));
    for (int nt : threads) {
      set_num_threads(nt);
      Shamn model(config);
      model.init(1);
      const auto params = model.named_parameters();
      AdamW opt(split_weight_decay(params, 0.1), {0.9, 0.95, 1e-8});
      Rng rng(7);
      std::vector<double> total, fwd, bwd, upd;
      for (int64_t s = 0; s < warmup + steps; ++s) {
        Tensor tokens = Tensor::empty({batch, seq}, DType::i32);
        Tensor targets = Tensor::empty({batch, seq}, DType::i32);
        for (int64_t i = 0; i < batch * seq; ++i) {
          tokens.data<int32_t>()[i] = static_cast<int32_t>(rng.below(config.vocab_size));
          targets.data<int32_t>()[i] = static_cast<int32_t>(rng.below(config.vocab_size));
        }
        const Stopwatch t0;
        opt.zero_grad();
        const Shamn::Loss loss = model.loss(tokens, targets);
        const double t_fwd = t0.seconds();
        const Stopwatch t1;
        loss.loss.backward();
        const double t_bwd = t1.seconds();
        const Stopwatch t2;
        clip_grad_norm(params, 1.0);
        opt.step(3e-4);
        const double t_upd = t2.seconds();
        if (s < warmup) continue;
        total.push_back(t0.seconds());
        fwd.push_back(t_fwd);
        bwd.push_back(t_bwd);
        upd.push_back(t_upd);
      }
      const double step = median(total);
      const nlohmann::ordered_json record = {{"impl", "shamn"},
                                             {"threads", nt},
                                             {"batch", batch},
                                             {"seq", seq},
                                             {"steps", steps},
                                             {"tokens_per_s", static_cast<double>(batch * seq) / step},
                                             {"step_s", step},
                                             {"forward_s", median(fwd)},
                                             {"backward_s", median(bwd)},
                                             {"optimizer_s", median(upd)},
                                             {"parameters", model.parameter_count()}};
      std::printf("%s\n", record.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
