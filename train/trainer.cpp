#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>

#include "autograd/ops.h"
#include "core/timing.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"
#include "core/hdf5_file.h"
#include "core/process_memory.h"
#include "core/profiler.h"
#include "data/batch_loader.h"
#include "data/token_file.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/model_checkpoint.h"
#include "train/progress.h"
#include "train/stop_signal.h"
#include "train/train_checkpoint.h"

namespace shamn {

namespace fs = std::filesystem;

namespace {

// Says everything through one place so tests can silence it.
struct Console {
  bool quiet;
  std::optional<Progress> progress;
  void say(const std::string& text) {
    if (quiet) return;
    if (progress) {
      progress->line(text);
    } else {
      std::printf("%s\n", text.c_str());
      std::fflush(stdout);
    }
  }
};

std::string fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, a, b, c);
  return buf;
}

// Mean cross-entropy over the first eval_batches consecutive batches of the val file.
double evaluate(Shamn& model, const TokenFile& val, const RunConfig& c) {
  const int64_t B = c.train.batch_size, T = c.train.seq_len;
  const int64_t n = std::min(c.train.eval_batches, sequential_batch_count(val, B, T));
  const ProfileScope profile("evaluate", ProfileCategory::eval);
  NoGradGuard no_grad;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Batch batch = sequential_batch(val, c.model.vocab_size, B, T, i);
    total += model.loss(batch.inputs, batch.targets).ce.value().item();
  }
  return total / static_cast<double>(n);
}

// best.h5 becomes a second name for the step checkpoint (no second write; pruning
// the step name later leaves best.h5 intact), swapped in atomically.
void link_best_checkpoint(const std::string& checkpoint, const std::string& best) {
  const fs::path best_path(best);
  const std::string temp =
      (best_path.parent_path() / ("." + best_path.filename().string() + ".tmp." + std::to_string(::getpid())))
          .string();
  std::error_code ec;
  fs::remove(temp, ec);
  fs::create_hard_link(checkpoint, temp, ec);
  if (ec) fs::copy_file(checkpoint, temp, fs::copy_options::overwrite_existing);  // no hard links here
  const int err = fault::pass("best.link");
  if (err != 0) fs::remove(temp, ec);
  SHAMN_INPUT_CHECK(err == 0, "cannot link '", best, "' to '", checkpoint, "': ", std::strerror(err));
  fs::rename(temp, best);
}

// An I/O error mid-run (a full disk) stops it; the message says what is safe.
[[noreturn]] void stop_after_io_error(const InputError& e, const std::string& run_dir) {
  const std::vector<std::string> kept = list_checkpoints(run_dir);
  throw InputError(std::string(e.what()) + ". The run stopped; the last good checkpoint is " +
                   (kept.empty() ? std::string("none (no checkpoint was written yet)") : kept.back()) +
                   ". Once the cause is fixed, continue with: shamn train --resume " + run_dir);
}

// Loads the newest checkpoint in run_dir that loads; damaged ones are reported and
// skipped. A checkpoint of another model is an error, not something to skip.
std::string resume_from(const std::string& run_dir, const ModelConfig& model_config, Shamn& model,
                        AdamW& optimizer, TrainState* state, Console& console) {
  const std::vector<std::string> all = list_checkpoints(run_dir);
  SHAMN_INPUT_CHECK(!all.empty(), "--resume ", run_dir, ": no checkpoint (ckpt_*.h5) to resume from");
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::optional<ModelConfig> saved;
    try {
      saved = read_checkpoint_config(Hdf5Reader(*it));
    } catch (const InputError& e) {
      console.say(std::string("warning: cannot resume from ") + *it + ": " + e.what());
      continue;
    }
    SHAMN_INPUT_CHECK(saved->to_toml() == model_config.to_toml(), "the [model] tables of the "
                      "config differ from those saved in '", *it, "'; a run resumes with the model "
                      "it was started with");
    try {
      *state = load_train_checkpoint(*it, model, optimizer);
      return *it;
    } catch (const InputError& e) {
      console.say(std::string("warning: cannot resume from ") + *it + ": " + e.what());
    }
  }
  SHAMN_INPUT_CHECK(false, "--resume ", run_dir, ": none of its ", all.size(),
                    " checkpoints can be loaded (see the warnings above)");
  return {};
}

}  // namespace

TrainResult train(RunConfig config, const TrainOptions& options) {
  const Stopwatch started;
  const bool resuming = !options.resume_dir.empty();
  if (resuming) config.train.out_dir = options.resume_dir;
  const RunConfig& c = config;
  const std::string run_dir = c.train.out_dir;
  Console console{options.quiet, std::nullopt};

  if (resuming) {
    SHAMN_INPUT_CHECK(fs::is_directory(run_dir), "--resume ", run_dir, ": no such run directory");
  } else {
    const auto existing = list_checkpoints(run_dir);
    SHAMN_INPUT_CHECK(existing.empty() && !fs::exists(best_checkpoint_file(run_dir)),
                      "train.out_dir '", run_dir, "' already holds a run (",
                      existing.empty() ? best_checkpoint_file(run_dir) : existing.back(),
                      "); resume it with --resume ", run_dir, " or choose another train.out_dir");
  }
  if (const int stale = remove_stale_temp_files(run_dir))
    console.say("removed " + std::to_string(stale) + " unfinished temporary file(s) in " + run_dir);

  // Data first: a bad token file should fail before minutes of model setup.
  const TokenFormat format = token_format_from_string(c.data.format);
  auto train_file = std::make_shared<const TokenFile>(c.data.train_path, format);
  train_file->check_vocab(c.model.vocab_size);
  std::unique_ptr<TokenFile> val_file;
  if (!c.data.val_path.empty()) {
    val_file = std::make_unique<TokenFile>(c.data.val_path, format);
    val_file->check_vocab(c.model.vocab_size);
    SHAMN_INPUT_CHECK(sequential_batch_count(*val_file, c.train.batch_size, c.train.seq_len) >= 1,
                      "val file '", c.data.val_path, "' holds ", val_file->size(),
                      " tokens, too few for one evaluation batch of ", c.train.batch_size, " x ",
                      c.train.seq_len + 1);
  }

  Shamn model(c.model);
  AdamW optimizer(split_weight_decay(model.named_parameters(), c.optim.weight_decay),
                  {c.optim.beta1, c.optim.beta2, c.optim.eps});
  TrainState state;
  state.data_seed = static_cast<uint64_t>(c.train.seed);
  if (resuming) {
    const std::string from = resume_from(run_dir, c.model, model, optimizer, &state, console);
    SHAMN_INPUT_CHECK(state.data_seed == static_cast<uint64_t>(c.train.seed), "train.seed = ",
                      c.train.seed, " but '", from, "' was trained with seed ", state.data_seed,
                      "; an exact resume needs the same seed");
    console.say("resuming " + run_dir + " from " + from + " (step " + std::to_string(state.step) + ")");
  } else if (!c.train.init_from.empty()) {
    const Hdf5Reader reader(c.train.init_from);
    SHAMN_INPUT_CHECK(read_checkpoint_config(reader).to_toml() == c.model.to_toml(),
                      "train.init_from '", c.train.init_from,
                      "' holds a model whose [model] tables differ from the config's");
    load_model_tensors(reader, model);
  } else {
    model.init(static_cast<uint64_t>(c.train.seed));
  }

  const std::string resolved = c.to_toml();
  fs::create_directories(run_dir);  // only once every input checked out: no empty run left behind
  write_file_atomically((fs::path(run_dir) / "config.toml").string(), resolved);
  if (!options.quiet)
    std::printf("# resolved config (saved in %s/config.toml)\n%s\n", run_dir.c_str(),
                resolved.c_str());
  if (!options.quiet) console.progress.emplace(c.log.progress, c.train.max_steps, c.log.every);
  const int64_t params = model.parameter_count();
  console.say(fmt("model: %.0f parameters (%.1f MiB f32); %.0f tokens per step", double(params),
                  double(params) * 4 / (1 << 20), double(c.tokens_per_step())));

  MetricsLog metrics((fs::path(run_dir) / "metrics.jsonl").string(), resuming, state.step);
  BatchLoader loader(train_file, c.model.vocab_size, c.train.batch_size, c.train.seq_len,
                     state.data_seed, c.train.prefetch);
  loader.seek(state.data_position);
  const LrSchedule schedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.max_steps};
  const std::vector<NamedVar> named = model.named_parameters();
  StopSignal stop;
  TrainResult result;
  std::vector<double> rates;
  std::deque<double> recent_seconds;  // the last log.every step times, for tok/s and ETA

  auto checkpoint = [&](bool also_best) {
    const ProfileScope profile("checkpoint", ProfileCategory::io);
    const std::string path = checkpoint_file(run_dir, state.step);
    save_train_checkpoint(path, model, optimizer, resolved, state);
    if (also_best) link_best_checkpoint(path, best_checkpoint_file(run_dir));
    prune_checkpoints(run_dir, c.train.keep_last);
    result.last_checkpoint = path;
  };
  auto run_eval = [&]() -> bool {  // true when this is the best val loss so far
    if (!val_file) return false;
    const double loss = evaluate(model, *val_file, c);
    result.last_val_loss = loss;
    metrics.write(state.step, {{"val_loss", loss}, {"val_ppl", std::exp(loss)}});
    const bool best = loss < state.best_val_loss;
    if (best) state.best_val_loss = loss;
    console.say(fmt("eval: val loss %.4f | val ppl %.2f", loss, std::exp(loss)) +
                (best ? " (best)" : ""));
    return best;
  };

  if (state.step >= c.train.max_steps)
    console.say("the run is already at train.max_steps = " + std::to_string(c.train.max_steps));

  int64_t steps_here = 0;  // steps run by this process, for the profiler's trace window
  try {
    while (state.step < c.train.max_steps) {
      profile_begin_step(++steps_here);
      const ProfileScope step_scope("train_step", ProfileCategory::step);
      const Stopwatch step_clock;
      const double lr = schedule.at(state.step);
      profiled("zero_grad", ProfileCategory::optimizer, [&] { optimizer.zero_grad(); });
      double loss_sum = 0, ce_sum = 0, aux_sum = 0;
      for (int64_t micro = 0; micro < c.train.grad_accum; ++micro) {
        const Batch batch = profiled("batch_wait", ProfileCategory::data, [&] { return loader.next(); });
        const Shamn::Loss loss = profiled("forward", ProfileCategory::forward,
                                          [&] { return model.loss(batch.inputs, batch.targets); });
        loss_sum += loss.loss.value().item();
        ce_sum += loss.ce.value().item();
        aux_sum += loss.aux.value().item();
        const Var scaled = scale(loss.loss, 1.0 / static_cast<double>(c.train.grad_accum));
        profiled("backward", ProfileCategory::backward, [&] { scaled.backward(); });
      }
      state.data_position = loader.position();
      const double n_micro = static_cast<double>(c.train.grad_accum);
      const double loss = loss_sum / n_micro;
      if (options.after_backward) options.after_backward(state.step + 1, model);
      const double grad_norm = profiled("clip_grad_norm", ProfileCategory::optimizer,
                                        [&] { return clip_grad_norm(named, c.optim.grad_clip); });
      const bool skipped = !std::isfinite(loss) || !std::isfinite(grad_norm);
      if (skipped) {
        ++state.bad_steps;
      } else {
        const ProfileScope profile("adamw_step", ProfileCategory::optimizer);
        optimizer.step(lr);
        state.bad_steps = 0;
      }
      state.optim_step = optimizer.step_count();
      ++state.step;
      state.tokens_seen += c.tokens_per_step();
      const double step_s = step_clock.seconds();
      state.elapsed_s += step_s;
      if (result.first_step_s == 0) result.first_step_s = started.seconds();

      recent_seconds.push_back(step_s);
      if (static_cast<int64_t>(recent_seconds.size()) > c.log.every) recent_seconds.pop_front();
      double window = 0;
      for (double s : recent_seconds) window += s;
      const double rate = static_cast<double>(c.tokens_per_step()) / step_s;
      rates.push_back(rate);
      metrics.write(state.step, {{"loss", loss}, {"ce", ce_sum / n_micro}, {"aux", aux_sum / n_micro},
                                 {"lr", lr}, {"grad_norm", grad_norm}, {"tokens_per_s", rate},
                                 {"elapsed_s", state.elapsed_s}, {"skipped", skipped ? 1.0 : 0.0}});
      if (console.progress) {
        const double mean_step = window / static_cast<double>(recent_seconds.size());
        console.progress->step({state.step, loss, lr, grad_norm,
                                static_cast<double>(c.tokens_per_step()) / mean_step,
                                mean_step * static_cast<double>(c.train.max_steps - state.step),
                                skipped});
      }
      if (state.bad_steps >= c.train.max_bad_steps) {
        const auto kept = list_checkpoints(run_dir);
        SHAMN_CHECK(false, "the loss or gradient norm was not finite for ", state.bad_steps,
                    " steps in a row (train.max_bad_steps), up to step ", state.step,
                    "; stopping without saving. The last good checkpoint is ",
                    kept.empty() ? std::string("none (no checkpoint was written yet)") : kept.back(),
                    "; try a lower optim.lr or optim.grad_clip");
      }

      const bool last = state.step == c.train.max_steps;
      const bool eval_now = last || (c.train.eval_every > 0 && state.step % c.train.eval_every == 0);
      const bool best = eval_now && run_eval();
      const bool save_now = last || stop.requested() || best ||
                            (c.train.checkpoint_every > 0 && state.step % c.train.checkpoint_every == 0);
      if (save_now) checkpoint(best);
      if (stop.requested() && !last) {
        result.interrupted = true;
        console.say("stopped by signal " + std::to_string(stop.signal_number()) + " at step " +
                    std::to_string(state.step) + "; resume with: shamn train --resume " + run_dir);
        break;
      }
    }
  } catch (const InputError& e) {
    stop_after_io_error(e, run_dir);
  }

  result.step = state.step;
  result.best_val_loss = state.best_val_loss;
  result.median_tokens_per_s = median(rates);
  result.peak_rss_bytes = peak_rss_bytes();
  const double state_mib = 4.0 * 4.0 * static_cast<double>(params) / (1 << 20);
  console.say(fmt("done: step %.0f | median %.0f tok/s | first step after %.2f s", double(state.step),
                  result.median_tokens_per_s, result.first_step_s));
  console.say(fmt("peak RSS %.0f MiB (parameters + gradients + 2 AdamW moments: %.0f MiB, ratio %.2f)",
                  double(result.peak_rss_bytes) / (1 << 20), state_mib,
                  double(result.peak_rss_bytes) / (1 << 20) / state_mib));
  if (std::isfinite(result.last_val_loss))
    console.say(fmt("final val loss %.4f | val perplexity %.2f", result.last_val_loss,
                    std::exp(result.last_val_loss)));
  return result;
}

}  // namespace shamn
