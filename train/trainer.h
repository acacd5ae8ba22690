#pragma once
// The training loop: `shamn train`. Warm-up + cosine LR, global grad-norm
// clipping, gradient accumulation, periodic evaluation on the val file, metrics
// in <run dir>/metrics.jsonl, full checkpoints (train/train_checkpoint.h) every
// train.checkpoint_every steps, on SIGINT/SIGTERM and at the end, and an exact
// resume: a run stopped and resumed produces the same weights and metrics as one
// that never stopped (the data order is a pure function of seed and position).
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "layers/module.h"
#include "train/run_config.h"

namespace shamn {

struct TrainOptions {
  std::string resume_dir;  // "" = a new run in config.train.out_dir
  // Called after each step's backward pass, before clipping, with the 1-based
  // step (tests use it to inject faults such as a NaN gradient).
  std::function<void(int64_t step, Module& model)> after_backward;
  bool quiet = false;  // no printing (tests)
};

struct TrainResult {
  int64_t step = 0;  // steps done when the run ended
  bool interrupted = false;
  double last_val_loss = std::numeric_limits<double>::quiet_NaN();
  double best_val_loss = std::numeric_limits<double>::infinity();
  std::string last_checkpoint;
  double median_tokens_per_s = 0;
  double first_step_s = 0;  // from the start of train() to the end of the first step
  int64_t peak_rss_bytes = 0;
  // Large blocks (core/aligned.h) over the steps, at most: live when a
  // micro-batch starts (weights, gradients, moments, data), added by its
  // forward and kept for the backward (activations), and the peak above the
  // start during forward and backward.
  int64_t step_start_bytes = 0, activation_bytes = 0, step_peak_bytes = 0;
};

TrainResult train(RunConfig config, const TrainOptions& options = {});

}  // namespace shamn
