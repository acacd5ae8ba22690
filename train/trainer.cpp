#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"
#include "core/hdf5_file.h"
#include "core/process_memory.h"
#include "core/profiler.h"
#include "core/timing.h"
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
  const std::string temp = temp_path_for(best);
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
    SHAMN_INPUT_CHECK(saved->to_toml() == model_config.to_toml(),
                      "the [model] tables of the "
                      "config differ from those saved in '",
                      *it,
                      "'; a run resumes with the model "
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

// The run directory: a new run needs an empty one, a resume an existing one.
void check_run_dir(const std::string& run_dir, bool resuming, Console& console) {
  if (resuming) {
    SHAMN_INPUT_CHECK(fs::is_directory(run_dir), "--resume ", run_dir, ": no such run directory");
  } else {
    const auto existing = list_checkpoints(run_dir);
    SHAMN_INPUT_CHECK(existing.empty() && !fs::exists(best_checkpoint_file(run_dir)), "train.out_dir '",
                      run_dir, "' already holds a run (",
                      existing.empty() ? best_checkpoint_file(run_dir) : existing.back(),
                      "); resume it with --resume ", run_dir, " or choose another train.out_dir");
  }
  if (const int stale = remove_stale_temp_files(run_dir))
    console.say("removed " + std::to_string(stale) + " unfinished temporary file(s) in " + run_dir);
}

struct DataFiles {
  std::shared_ptr<const TokenFile> train;
  std::unique_ptr<TokenFile> val;  // null without data.val_path
};

// Opened and checked first: a bad token file should fail before minutes of model setup.
DataFiles open_data(const RunConfig& c) {
  const TokenFormat format = token_format_from_string(c.data.format);
  DataFiles files;
  auto train = std::make_shared<TokenFile>(c.data.train_path, format);
  train->check_vocab(c.model.vocab_size);
  files.train = std::move(train);
  if (!c.data.val_path.empty()) {
    files.val = std::make_unique<TokenFile>(c.data.val_path, format);
    files.val->check_vocab(c.model.vocab_size);
    SHAMN_INPUT_CHECK(sequential_batch_count(*files.val, c.train.batch_size, c.train.seq_len) >= 1,
                      "val file '", c.data.val_path, "' holds ", files.val->size(),
                      " tokens, too few for one evaluation batch of ", c.train.batch_size, " x ",
                      c.train.seq_len + 1);
  }
  return files;
}

// The starting weights: the resumed checkpoint, train.init_from, or a fresh init.
void load_or_init(const RunConfig& c, const std::string& run_dir, bool resuming, Shamn& model,
                  AdamW& optimizer, TrainState& state, Console& console) {
  state.data_seed = static_cast<uint64_t>(c.train.seed);
  if (resuming) {
    const std::string from = resume_from(run_dir, c.model, model, optimizer, &state, console);
    SHAMN_INPUT_CHECK(state.data_seed == static_cast<uint64_t>(c.train.seed), "train.seed = ", c.train.seed,
                      " but '", from, "' was trained with seed ", state.data_seed,
                      "; an exact resume needs the same seed");
    console.say("resuming " + run_dir + " from " + from + " (step " + std::to_string(state.step) + ")");
  } else if (!c.train.init_from.empty()) {
    const Hdf5Reader reader(c.train.init_from);
    SHAMN_INPUT_CHECK(read_checkpoint_config(reader).to_toml() == c.model.to_toml(), "train.init_from '",
                      c.train.init_from, "' holds a model whose [model] tables differ from the config's");
    load_model_tensors(reader, model);
  } else {
    model.init(static_cast<uint64_t>(c.train.seed));
  }
}

// What one optimizer step did, for the metrics and the progress line.
struct StepStats {
  double loss = 0, ce = 0, aux = 0, lr = 0, grad_norm = 0, seconds = 0;
  bool skipped = false;
};

// One training run between setup and the final report: the model, optimizer, data
// and run directory, and the step / evaluate / checkpoint cycle over them.
class Run {
 public:
  Run(const RunConfig& c, const TrainOptions& options, DataFiles data, Console& console)
      : c_(c),
        options_(options),
        console_(console),
        run_dir_(c.train.out_dir),
        data_(std::move(data)),
        model_(c.model),
        optimizer_(split_weight_decay(model_.named_parameters(), c.optim.weight_decay),
                   {c.optim.beta1, c.optim.beta2, c.optim.eps}),
        named_(model_.named_parameters()),
        schedule_{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.max_steps} {}

  // Weights in place, the run directory and its config written, the logs open.
  void start(bool resuming) {
    load_or_init(c_, run_dir_, resuming, model_, optimizer_, state_, console_);
    resolved_ = c_.to_toml();
    fs::create_directories(run_dir_);  // only once every input checked out: no empty run left behind
    write_file_atomically((fs::path(run_dir_) / "config.toml").string(), resolved_);
    if (!options_.quiet)
      std::printf("# resolved config (saved in %s/config.toml)\n%s\n", run_dir_.c_str(), resolved_.c_str());
    if (!options_.quiet) console_.progress.emplace(c_.log.progress, c_.train.max_steps, c_.log.every);
    const double params = static_cast<double>(model_.parameter_count());
    console_.say(fmt("model: %.0f parameters (%.1f MiB f32); %.0f tokens per step", params,
                     params * 4 / (1 << 20), double(c_.tokens_per_step())));
    metrics_.emplace((fs::path(run_dir_) / "metrics.jsonl").string(), resuming, state_.step);
    loader_.emplace(data_.train, c_.model.vocab_size, c_.train.batch_size, c_.train.seq_len, state_.data_seed,
                    c_.train.prefetch);
    loader_->seek(state_.data_position);
  }

  bool finished() const { return state_.step >= c_.train.max_steps; }

  // grad_accum micro-batches, clipping, and the AdamW update unless the step is not finite.
  StepStats step() {
    const Stopwatch clock;
    StepStats s;
    s.lr = schedule_.at(state_.step);
    profiled("zero_grad", ProfileCategory::optimizer, [&] { optimizer_.zero_grad(); });
    for (int64_t micro = 0; micro < c_.train.grad_accum; ++micro) {
      const Batch batch = profiled("batch_wait", ProfileCategory::data, [&] { return loader_->next(); });
      const Shamn::Loss loss = profiled("forward", ProfileCategory::forward,
                                        [&] { return model_.loss(batch.inputs, batch.targets); });
      s.loss += loss.loss.value().item();
      s.ce += loss.ce.value().item();
      s.aux += loss.aux.value().item();
      const Var scaled = scale(loss.loss, 1.0 / static_cast<double>(c_.train.grad_accum));
      profiled("backward", ProfileCategory::backward, [&] { scaled.backward(); });
    }
    state_.data_position = loader_->position();
    const double n_micro = static_cast<double>(c_.train.grad_accum);
    s.loss /= n_micro;
    s.ce /= n_micro;
    s.aux /= n_micro;
    if (options_.after_backward) options_.after_backward(state_.step + 1, model_);
    s.grad_norm = profiled("clip_grad_norm", ProfileCategory::optimizer,
                           [&] { return clip_grad_norm(named_, c_.optim.grad_clip); });
    s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
    if (s.skipped) {
      ++state_.bad_steps;
    } else {
      const ProfileScope profile("adamw_step", ProfileCategory::optimizer);
      optimizer_.step(s.lr);
      state_.bad_steps = 0;
    }
    state_.optim_step = optimizer_.step_count();
    ++state_.step;
    state_.tokens_seen += c_.tokens_per_step();
    s.seconds = clock.seconds();
    state_.elapsed_s += s.seconds;
    return s;
  }

  // The step's metrics record and progress line; stops the run after too many bad steps.
  void report(const StepStats& s) {
    recent_seconds_.push_back(s.seconds);
    if (static_cast<int64_t>(recent_seconds_.size()) > c_.log.every) recent_seconds_.pop_front();
    double window = 0;
    for (double t : recent_seconds_) window += t;
    const double rate = static_cast<double>(c_.tokens_per_step()) / s.seconds;
    rates_.push_back(rate);
    metrics_->write(state_.step, {{"loss", s.loss},
                                  {"ce", s.ce},
                                  {"aux", s.aux},
                                  {"lr", s.lr},
                                  {"grad_norm", s.grad_norm},
                                  {"tokens_per_s", rate},
                                  {"elapsed_s", state_.elapsed_s},
                                  {"skipped", s.skipped ? 1.0 : 0.0}});
    if (console_.progress) {
      const double mean_step = window / static_cast<double>(recent_seconds_.size());
      console_.progress->step({state_.step, s.loss, s.lr, s.grad_norm,
                               static_cast<double>(c_.tokens_per_step()) / mean_step,
                               mean_step * static_cast<double>(c_.train.max_steps - state_.step), s.skipped});
    }
    if (state_.bad_steps >= c_.train.max_bad_steps) {
      const auto kept = list_checkpoints(run_dir_);
      SHAMN_CHECK(false, "the loss or gradient norm was not finite for ", state_.bad_steps,
                  " steps in a row (train.max_bad_steps), up to step ", state_.step,
                  "; stopping without saving. The last good checkpoint is ",
                  kept.empty() ? std::string("none (no checkpoint was written yet)") : kept.back(),
                  "; try a lower optim.lr or optim.grad_clip");
    }
  }

  // Evaluates and checkpoints when the schedule, the end of the run or a stop
  // request says so. Returns false when a stop request ends the run here.
  bool evaluate_and_checkpoint(const StopSignal& stop, TrainResult& result) {
    const bool last = finished();
    const bool eval_now = last || (c_.train.eval_every > 0 && state_.step % c_.train.eval_every == 0);
    const bool best = eval_now && run_eval(result);
    const bool save_now = last || stop.requested() || best ||
                          (c_.train.checkpoint_every > 0 && state_.step % c_.train.checkpoint_every == 0);
    if (save_now) checkpoint(best, result);
    if (!stop.requested() || last) return true;
    result.interrupted = true;
    console_.say("stopped by signal " + std::to_string(stop.signal_number()) + " at step " +
                 std::to_string(state_.step) + "; resume with: shamn train --resume " + run_dir_);
    return false;
  }

  const TrainState& state() const { return state_; }
  const std::vector<double>& rates() const { return rates_; }
  int64_t parameter_count() const { return model_.parameter_count(); }

 private:
  // True when this is the best val loss so far.
  bool run_eval(TrainResult& result) {
    if (!data_.val) return false;
    const double loss = evaluate(model_, *data_.val, c_);
    result.last_val_loss = loss;
    metrics_->write(state_.step, {{"val_loss", loss}, {"val_ppl", std::exp(loss)}});
    const bool best = loss < state_.best_val_loss;
    if (best) state_.best_val_loss = loss;
    console_.say(fmt("eval: val loss %.4f | val ppl %.2f", loss, std::exp(loss)) + (best ? " (best)" : ""));
    return best;
  }

  void checkpoint(bool also_best, TrainResult& result) {
    const ProfileScope profile("checkpoint", ProfileCategory::io);
    const std::string path = checkpoint_file(run_dir_, state_.step);
    save_train_checkpoint(path, model_, optimizer_, resolved_, state_);
    if (also_best) link_best_checkpoint(path, best_checkpoint_file(run_dir_));
    prune_checkpoints(run_dir_, c_.train.keep_last);
    result.last_checkpoint = path;
  }

  const RunConfig& c_;
  const TrainOptions& options_;
  Console& console_;
  const std::string run_dir_;
  DataFiles data_;
  Shamn model_;
  AdamW optimizer_;
  const std::vector<NamedVar> named_;
  const LrSchedule schedule_;
  TrainState state_;
  std::string resolved_;
  std::optional<MetricsLog> metrics_;
  std::optional<BatchLoader> loader_;
  std::vector<double> rates_;
  std::deque<double> recent_seconds_;  // the last log.every step times, for tok/s and ETA
};

void report_end(const Run& run, const TrainResult& result, Console& console) {
  const double state_mib = 4.0 * 4.0 * static_cast<double>(run.parameter_count()) / (1 << 20);
  console.say(fmt("done: step %.0f | median %.0f tok/s | first step after %.2f s", double(result.step),
                  result.median_tokens_per_s, result.first_step_s));
  console.say(fmt("peak RSS %.0f MiB (parameters + gradients + 2 AdamW moments: %.0f MiB, ratio %.2f)",
                  double(result.peak_rss_bytes) / (1 << 20), state_mib,
                  double(result.peak_rss_bytes) / (1 << 20) / state_mib));
  if (std::isfinite(result.last_val_loss))
    console.say(fmt("final val loss %.4f | val perplexity %.2f", result.last_val_loss,
                    std::exp(result.last_val_loss)));
}

}  // namespace

TrainResult train(RunConfig config, const TrainOptions& options) {
  const Stopwatch started;
  const bool resuming = !options.resume_dir.empty();
  if (resuming) config.train.out_dir = options.resume_dir;
  const RunConfig& c = config;
  Console console{options.quiet, std::nullopt};
  check_run_dir(c.train.out_dir, resuming, console);
  Run run(c, options, open_data(c), console);
  run.start(resuming);

  if (run.finished())
    console.say("the run is already at train.max_steps = " + std::to_string(c.train.max_steps));
  StopSignal stop;
  TrainResult result;
  int64_t steps_here = 0;  // steps run by this process, for the profiler's trace window
  try {
    while (!run.finished()) {
      profile_begin_step(++steps_here);
      const ProfileScope step_scope("train_step", ProfileCategory::step);
      const StepStats s = run.step();
      if (result.first_step_s == 0) result.first_step_s = started.seconds();
      run.report(s);
      if (!run.evaluate_and_checkpoint(stop, result)) break;
    }
  } catch (const InputError& e) {
    stop_after_io_error(e, c.train.out_dir);
  }

  result.step = run.state().step;
  result.best_val_loss = run.state().best_val_loss;
  result.median_tokens_per_s = median(run.rates());
  result.peak_rss_bytes = peak_rss_bytes();
  report_end(run, result, console);
  return result;
}

}  // namespace shamn
