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
#include "core/aligned.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"
#include "core/hdf5_file.h"
#include "core/process_memory.h"
#include "core/product_precision.h"
#include "core/profiler.h"
#include "core/temp_file_cleanup.h"
#include "core/timing.h"
#include "data/batch_loader.h"
#include "data/token_file.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_schedule.h"
#include "train/communicator.h"
#include "train/grad_exchange.h"
#include "train/grad_tree.h"
#include "train/metrics_log.h"
#include "train/model_checkpoint.h"
#include "train/progress.h"
#include "train/run_dir_lock.h"
#include "train/run_plot.h"
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

// Mean cross-entropy over the first eval_batches consecutive batches of the val
// file. The ranks take consecutive shares of the batches; the per-batch losses are
// then added in batch order, so the mean is the same at any rank count.
double evaluate(Shamn& model, const TokenFile& val, const RunConfig& c, Communicator& comm) {
  const int64_t B = c.train.batch_size, T = c.train.seq_len;
  const int64_t n = std::min(c.train.eval_batches, sequential_batch_count(val, B, T));
  const int64_t share = (n + comm.size() - 1) / comm.size();
  const ProfileScope profile("evaluate", ProfileCategory::eval);
  NoGradGuard no_grad;
  std::vector<double> mine(static_cast<size_t>(share), 0.0);
  for (int64_t j = 0; j < share; ++j) {
    const int64_t i = comm.rank() * share + j;
    if (i >= n) break;
    const Batch batch = sequential_batch(val, c.model.vocab_size, B, T, i);
    mine[static_cast<size_t>(j)] = model.loss(batch.inputs, batch.targets).ce.value().item();
  }
  const std::vector<double> losses = comm.all_gather(mine);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += losses[static_cast<size_t>(i)];
  return total / static_cast<double>(n);
}

// A new best checkpoint is written as best.h5 and then given its step name, a
// second name for the same file (no second write; pruning the step name later
// leaves best.h5 intact), made atomically. Where the file system has no hard
// links it is a copy, written as every file is (fsynced, renamed, the directory
// fsynced): a bare copy renamed into place could leave a torn one after a power cut.
void link_step_name(const std::string& best, const std::string& checkpoint) {
  const std::string temp = temp_path_for(checkpoint);
  const TempFileRegistration registration(temp);
  std::error_code ec;
  fs::remove(temp, ec);
  const int link_fault = fault::pass("best.hardlink");
  if (link_fault == 0) fs::create_hard_link(best, temp, ec);
  if (link_fault != 0 || ec) return copy_file_atomically(best, checkpoint, "best");
  const int err = fault::pass("best.link");
  if (err != 0) fs::remove(temp, ec);
  SHAMN_INPUT_CHECK(err == 0, "cannot link '", checkpoint, "' to '", best, "': ", std::strerror(err));
  fs::rename(temp, checkpoint, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
  }
  SHAMN_INPUT_CHECK(!ec, "cannot rename '", temp, "' to '", checkpoint, "': ", ec.message());
}

// An I/O error mid-run (a full disk) stops it; the message says what is safe.
[[noreturn]] void stop_after_io_error(const InputError& e, const std::string& run_dir) {
  const std::vector<std::string> kept = list_checkpoints(run_dir);
  if (!step_name_best_lacks(run_dir).empty())  // --resume gives best.h5 its step name and goes on from it
    throw InputError(std::string(e.what()) + ". The run stopped; the last good checkpoint is " +
                     best_checkpoint_file(run_dir) +
                     ". Once the cause is fixed, continue with: shamn train --resume " + run_dir);
  if (kept.empty())  // --resume would find nothing: a new run may use the directory
    throw InputError(
        std::string(e.what()) +
        ". The run stopped; the last good checkpoint is none (no checkpoint was written yet). Once "
        "the cause is fixed, run the same command again (" +
        run_dir + " holds no checkpoint to resume from)");
  throw InputError(std::string(e.what()) + ". The run stopped; the last good checkpoint is " + kept.back() +
                   ". Once the cause is fixed, continue with: shamn train --resume " + run_dir);
}

// Loads the newest checkpoint in run_dir that loads; damaged ones are reported and
// skipped. A checkpoint of another model is an error, not something to skip.
// With `adapter` (a LoRA run), a checkpoint trained on another base is an error too.
// The damaged ones newer than the one loaded are then moved aside (kept, renamed
// out of the ckpt_*.h5 pattern): left in place, they would count among the
// newest keep_last at the next pruning and push out the checkpoints this run
// writes and the one it resumed from.
std::string resume_from(const std::string& run_dir, const ModelConfig& model_config, Shamn& model,
                        AdamW& optimizer, TrainState* state, const AdapterIdentity* adapter,
                        Console& console) {
  const std::vector<std::string> all = list_checkpoints(run_dir);
  SHAMN_INPUT_CHECK(!all.empty(), "--resume ", run_dir, ": no checkpoint (ckpt_*.h5) to resume from");
  std::vector<std::string> damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::optional<ModelConfig> saved;
    try {
      saved = read_checkpoint_config(Hdf5Reader(*it));
    } catch (const InputError& e) {
      console.say(std::string("warning: cannot resume from ") + *it + ": " + e.what());
      damaged.push_back(*it);
      continue;
    }
    SHAMN_INPUT_CHECK(saved->to_toml() == model_config.to_toml(),
                      "the [model] tables of the "
                      "config differ from those saved in '",
                      *it,
                      "'; a run resumes with the model "
                      "it was started with");
    if (adapter) check_adapter_checkpoint(Hdf5Reader(*it), *adapter);
    try {
      *state = load_train_checkpoint(*it, model, optimizer, adapter);
    } catch (const InputError& e) {
      console.say(std::string("warning: cannot resume from ") + *it + ": " + e.what());
      damaged.push_back(*it);
      continue;
    }
    for (const std::string& d : damaged)
      console.say("warning: moved " + d + ", which does not load, aside to " +
                  set_aside_damaged_checkpoint(d) + " (kept, out of the rotation)");
    return *it;
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

// Data parallelism splits each step's grad_accum micro-batches evenly, and the
// ranks' partial sums meet in a binary tree (Communicator::sum_tree).
void check_rank_count(const RunConfig& c, int ranks) {
  SHAMN_INPUT_CHECK((ranks & (ranks - 1)) == 0,
                    "shamn train runs on 1, 2, 4, 8, ... ranks (a power of two, so "
                    "that any rank count gives bitwise the same run); mpirun started ",
                    ranks);
  SHAMN_INPUT_CHECK(c.train.grad_accum % ranks == 0, "train.grad_accum = ", c.train.grad_accum,
                    " micro-batches per step cannot be shared evenly by ", ranks,
                    " ranks; use a multiple of ", ranks, " (e.g. --set train.grad_accum=", ranks,
                    " with train.batch_size divided by ", ranks,
                    " keeps the step's size; that draws other windows, so it is a new run, "
                    "not this one on more ranks)");
}

// Every rank must run the same code on the same config and data; a rank that
// differs is named before any work is done.
void check_ranks_agree(Communicator& comm, const RunConfig& c, const DataFiles& data) {
  if (comm.size() == 1) return;
  char files[128];
  std::snprintf(files, sizeof(files), "%08x %08x", data.train->checksum(),
                data.val ? data.val->checksum() : 0u);
  const std::vector<std::string> what = {SHAMN_VERSION, c.to_toml(), files};
  const char* names[] = {"shamn version", "resolved config", "data checksum (CRC-32 of train, val)"};
  std::string problems;
  for (size_t k = 0; k < what.size(); ++k) {
    const std::vector<std::string> all = all_gather_strings(comm, what[k]);
    for (int r = 1; r < comm.size(); ++r) {
      if (all[static_cast<size_t>(r)] == all[0]) continue;
      problems += "\n  rank " + std::to_string(r) + ": its " + names[k] + " does not match rank 0's";
      if (k != 1) problems += " ('" + all[static_cast<size_t>(r)] + "' vs '" + all[0] + "')";
    }
  }
  SHAMN_INPUT_CHECK(problems.empty(),
                    "the ranks of this run disagree; every rank needs the same shamn, config "
                    "and files at the same paths:",
                    problems);
}

// The base of a LoRA run: train.init_from's weights (every tensor but the
// adapters), and its identity for the adapter checkpoints.
AdapterIdentity load_lora_base(const RunConfig& c, Shamn& model) {
  const Hdf5Reader reader(c.train.init_from);
  SHAMN_INPUT_CHECK(read_checkpoint_config(reader).to_toml() == c.model.to_toml(), "train.init_from '",
                    c.train.init_from, "' holds a model whose [model] tables differ from the config's");
  load_model_tensors(reader, model, TensorSet::base);
  return {base_checksum(model), c.train.init_from, c.lora};
}

// A resume may change the run's settings (more steps, another learning rate, a
// bigger batch): the run then continues under them, which is no longer what
// either config gives from the start. Each change is named, so the log says so.
void note_changed_settings(const std::string& checkpoint, const RunConfig& c, Console& console) {
  const RunConfig saved = RunConfig::from_toml(Hdf5Reader(checkpoint).string_attribute("config"),
                                               checkpoint + " (attribute config)");
  const std::vector<std::string> changes = changed_settings(saved, c);
  if (changes.empty()) return;
  std::string list;
  for (const std::string& change : changes) list += (list.empty() ? "" : ", ") + change;
  console.say("note: settings changed since " + checkpoint + ": " + list);
}

// The starting weights: the resumed checkpoint, train.init_from, or a fresh init.
// A LoRA run loads its base first, then resumes or initialises the adapters.
void load_or_init(const RunConfig& c, const std::string& run_dir, bool resuming, Shamn& model,
                  AdamW& optimizer, TrainState& state, std::optional<AdapterIdentity>& adapter,
                  Console& console) {
  state.data_seed = static_cast<uint64_t>(c.train.seed);
  if (c.lora.enabled()) adapter = load_lora_base(c, model);
  const AdapterIdentity* identity = adapter ? &*adapter : nullptr;
  if (resuming) {
    // best.h5 ahead of the step checkpoints (a run stopped before its step name was
    // made): the name is made now, so the run resumes from the newest state it saved.
    if (const std::string name = step_name_best_lacks(run_dir); !name.empty()) {
      link_step_name(best_checkpoint_file(run_dir), name);
      console.say("note: the run stopped before " + best_checkpoint_file(run_dir) +
                  " was linked to its step name " + name + "; linked now");
    }
    const std::string from = resume_from(run_dir, c.model, model, optimizer, &state, identity, console);
    SHAMN_INPUT_CHECK(state.data_seed == static_cast<uint64_t>(c.train.seed), "train.seed = ", c.train.seed,
                      " but '", from, "' was trained with seed ", state.data_seed,
                      "; an exact resume needs the same seed");
    console.say("resuming " + run_dir + " from " + from + " (step " + std::to_string(state.step) + ")");
    note_changed_settings(from, c, console);
  } else if (adapter) {
    init_lora_adapters(model, static_cast<uint64_t>(c.train.seed));
  } else if (!c.train.init_from.empty()) {
    const Hdf5Reader reader(c.train.init_from);
    SHAMN_INPUT_CHECK(read_checkpoint_config(reader).to_toml() == c.model.to_toml(), "train.init_from '",
                      c.train.init_from, "' holds a model whose [model] tables differ from the config's");
    load_model_tensors(reader, model);
  } else {
    model.init(static_cast<uint64_t>(c.train.seed), c.weight_init());
  }
}

// The parameters that train: all of them, or with LoRA (lora.rank > 0) the adapters,
// which are attached here, with the base frozen: no gradients, no AdamW moments.
std::vector<NamedVar> trainable_parameters(Shamn& model, const LoraOptions& lora) {
  if (!lora.enabled()) return model.named_parameters();
  if (lora_parameters(model).empty()) {
    attach_lora(model, model.config(), lora);
    freeze_base(model);
  }
  return lora_parameters(model);
}

// What one optimizer step did, for the metrics and the progress line.
struct StepStats {
  double loss = 0, ce = 0, aux = 0, lr = 0, grad_norm = 0, seconds = 0;
  bool skipped = false;
};

// One training run between setup and the final report: the model, optimizer, data
// and run directory, and the step / evaluate / checkpoint cycle over them.
// TrainResult's large-block figures, over the steps so far.
struct StepMemory {
  int64_t step_start_bytes = 0, activation_bytes = 0, step_peak_bytes = 0;
};

class Run {
 public:
  Run(const RunConfig& c, const TrainOptions& options, DataFiles data, Console& console, Communicator& comm)
      : c_(c),
        options_(options),
        console_(console),
        comm_(comm),
        run_dir_(c.train.out_dir),
        data_(std::move(data)),
        model_(c.model),
        optimizer_(split_weight_decay(trainable_parameters(model_, c.lora), c.optim.weight_decay),
                   {c.optim.beta1, c.optim.beta2, c.optim.eps}),
        named_(trainable_parameters(model_, c.lora)),
        schedule_{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.max_steps},
        tree_(named_),
        exchange_(named_, static_cast<size_t>(c.train.bucket_mib * (1 << 20)) / sizeof(float)) {}

  // Weights in place, the run directory and its config written, the logs open.
  // Rank 0 alone reads and writes the run directory; the other ranks receive its
  // starting state (they need no copy of the run directory).
  void start(bool resuming) {
    fault::pass("train.start");
    if (comm_.is_root()) load_or_init(c_, run_dir_, resuming, model_, optimizer_, state_, adapter_, console_);
    share_starting_state();
    resolved_ = c_.to_toml();
    if (comm_.is_root()) {
      fs::create_directories(run_dir_);  // only once every input checked out: no empty run left behind
      write_file_atomically((fs::path(run_dir_) / "config.toml").string(), resolved_);
    }
    if (!console_.quiet) {
      std::printf("# resolved config (saved in %s/config.toml)\n%s\n", run_dir_.c_str(), resolved_.c_str());
      console_.progress.emplace(c_.log.progress, c_.train.max_steps, c_.log.every);
    }
    if (comm_.size() > 1)
      console_.say("data parallel: " + std::to_string(comm_.size()) + " ranks, " +
                   std::to_string(c_.train.grad_accum / comm_.size()) + " micro-batch(es) of " +
                   std::to_string(c_.train.batch_size) + " windows each per step");
    const double params = static_cast<double>(model_.parameter_count());
    console_.say(fmt("model: %.0f parameters (%.1f MiB f32); %.0f tokens per step", params,
                     params * 4 / (1 << 20), double(c_.tokens_per_step())));
    if (c_.lora.enabled())
      console_.say(fmt("LoRA: %.0f adapter parameters train (%.3f%% of the model), the base is frozen",
                       double(trainable_count()), 100.0 * double(trainable_count()) / params));
    if (product_precision() == ProductPrecision::bf16)  // set by train() from train.precision
      console_.say(bf16_dot_native()
                       ? "precision: matmul, block-sparse and hashed-head operands rounded to bf16, sums and "
                         "weights f32 (products on vdpbf16ps)"
                       : "precision: matmul, block-sparse and hashed-head operands rounded to bf16, sums and "
                         "weights f32; "
                         "note: without AVX512_BF16 at this kernel level the bf16 products run emulated "
                         "(the same numbers, no faster than f32)");
    if (comm_.is_root())
      metrics_.emplace((fs::path(run_dir_) / "metrics.jsonl").string(), resuming, state_.step);
    loader_.emplace(data_.train, c_.model.vocab_size, c_.train.batch_size, c_.train.seq_len, state_.data_seed,
                    c_.train.prefetch);
    // Each step draws grad_accum batches; rank r trains on its consecutive share.
    const int64_t per_rank = c_.train.grad_accum / comm_.size();
    loader_->share(state_.data_position, static_cast<uint64_t>(c_.train.grad_accum),
                   static_cast<uint64_t>(comm_.rank() * per_rank), static_cast<uint64_t>(per_rank));
    loader_->seek(state_.data_position);
  }

  bool finished() const { return state_.step >= c_.train.max_steps; }

  // grad_accum micro-batches, clipping, and the AdamW update unless the step is not finite.
  // The micro-batches' gradients are summed as a tree (train/grad_tree.h), this
  // rank's block of them here and the ranks' blocks across ranks.
  StepStats step() {
    const Stopwatch clock;
    StepStats s;
    s.lr = schedule_.at(state_.step);
    const int64_t per_rank = c_.train.grad_accum / comm_.size();
    const int64_t first = comm_.rank() * per_rank;
    std::vector<double> losses;  // loss, ce, aux of each of this rank's micro-batches
    const bool overlap = comm_.size() > 1 && c_.train.overlap_exchange;
    tree_.run(first, first + per_rank, [&](int64_t micro, bool last) {
      const Batch batch = profiled("batch_wait", ProfileCategory::data, [&] { return loader_->next(); });
      const int64_t start = static_cast<int64_t>(live_block_bytes());
      reset_peak_live_block_bytes();
      const Shamn::Loss loss = profiled("forward", ProfileCategory::forward, [&] {
        std::optional<LoraDropoutPass> noise;  // lora.dropout's masks for this micro-batch of the run
        if (c_.lora.dropout > 0)
          noise.emplace(model_, static_cast<uint64_t>(c_.train.seed),
                        static_cast<uint64_t>(state_.step * c_.train.grad_accum + micro));
        return model_.loss(batch.inputs, batch.targets);
      });
      memory_.step_start_bytes = std::max(memory_.step_start_bytes, start);
      memory_.activation_bytes =
          std::max(memory_.activation_bytes, static_cast<int64_t>(live_block_bytes()) - start);
      losses.insert(losses.end(),
                    {loss.loss.value().item(), loss.ce.value().item(), loss.aux.value().item()});
      const Var scaled = scale(loss.loss, 1.0 / static_cast<double>(c_.train.grad_accum));
      if (overlap && last) {
        exchange_.begin(comm_);
        profiled("backward", ProfileCategory::backward, [&] { scaled.backward(exchange_hooks()); });
      } else {
        profiled("backward", ProfileCategory::backward, [&] { scaled.backward(); });
      }
      memory_.step_peak_bytes =
          std::max(memory_.step_peak_bytes, static_cast<int64_t>(peak_live_block_bytes()) - start);
    });
    if (overlap)
      profiled("grad_exchange", ProfileCategory::comm, [&] { exchange_.finish(); });
    else
      profiled("grad_exchange", ProfileCategory::comm, [&] { exchange_.sum_over_ranks(comm_); });
    // Every micro-batch's losses, added in micro-batch order as one process does.
    const std::vector<double> all = comm_.all_gather(losses);
    for (size_t i = 0; i < all.size(); i += 3) {
      s.loss += all[i];
      s.ce += all[i + 1];
      s.aux += all[i + 2];
    }
    state_.data_position += static_cast<uint64_t>(c_.train.grad_accum);
    const double n_micro = static_cast<double>(c_.train.grad_accum);
    s.loss /= n_micro;
    s.ce /= n_micro;
    s.aux /= n_micro;
    if (options_.after_backward) options_.after_backward(state_.step + 1, model_);
    // Clipping's factor is applied by AdamW as it reads each gradient: no pass of its own.
    s.grad_norm = profiled("clip_grad_norm", ProfileCategory::optimizer, [&] { return grad_norm(named_); });
    s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
    if (s.skipped) {
      ++state_.bad_steps;
    } else {
      const ProfileScope profile("adamw_step", ProfileCategory::optimizer);
      optimizer_.step(s.lr, clip_scale(s.grad_norm, c_.optim.grad_clip));
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
    if (metrics_)
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
  // A stop request on any rank stops every rank after the same step.
  bool evaluate_and_checkpoint(const StopSignal& stop, TrainResult& result) {
    std::vector<uint8_t> signal{
        static_cast<uint8_t>(stop.requested() ? std::max(1, stop.signal_number()) : 0)};
    comm_.max_flags(signal);
    const bool stopping = signal[0] != 0;
    const bool last = finished();
    const bool eval_now = last || (c_.train.eval_every > 0 && state_.step % c_.train.eval_every == 0);
    const bool best = eval_now && run_eval(result);
    const bool save_now = last || stopping || best ||
                          (c_.train.checkpoint_every > 0 && state_.step % c_.train.checkpoint_every == 0);
    if (save_now && comm_.is_root()) checkpoint(best, result);
    if (!stopping || last) return true;
    result.interrupted = true;
    console_.say("stopped by signal " + std::to_string(signal[0]) + " at step " +
                 std::to_string(state_.step) + "; resume with: shamn train --resume " + run_dir_);
    return false;
  }

  const TrainState& state() const { return state_; }
  const std::vector<double>& rates() const { return rates_; }
  const StepMemory& memory() const { return memory_; }
  int64_t parameter_count() const { return model_.parameter_count(); }
  int64_t trainable_count() const {
    int64_t n = 0;
    for (const NamedVar& p : named_) n += p.var.numel();
    return n;
  }

 private:
  // True when this is the best val loss so far.
  bool run_eval(TrainResult& result) {
    if (!data_.val) return false;
    const double loss = evaluate(model_, *data_.val, c_, comm_);
    result.last_val_loss = loss;
    if (metrics_) {
      metrics_->write(state_.step, {{"val_loss", loss}, {"val_ppl", std::exp(loss)}});
      refresh_plot();
    }
    const bool best = loss < state_.best_val_loss;
    if (best) state_.best_val_loss = loss;
    console_.say(fmt("eval: val loss %.4f | val ppl %.2f", loss, std::exp(loss)) + (best ? " (best)" : ""));
    return best;
  }

  // RUN_DIR/plots/loss.svg, so a run always has a current picture. Best-effort:
  // without gnuplot the run says so once and trains on.
  void refresh_plot() {
    const ProfileScope profile("plot", ProfileCategory::io);
    const std::string why = refresh_loss_plot(run_dir_);
    if (why.empty() || plot_warned_) return;
    console_.say("note: " + why + " (training goes on; said once)");
    plot_warned_ = true;
  }

  // A new best is written as best.h5 first, then linked to its step name: a run
  // that stops between the two resumes from best.h5, making the step name then
  // (load_or_init). (In the other order a stop between them
  // left a step checkpoint that recorded the new best_val_loss beside a best.h5 of
  // the old best; later evaluations had to beat the new value, so best.h5 stayed
  // old and pruning deleted the only copy of the best weights.)
  void checkpoint(bool also_best, TrainResult& result) {
    const ProfileScope profile("checkpoint", ProfileCategory::io);
    const std::string path = checkpoint_file(run_dir_, state_.step);
    const std::string first = also_best ? best_checkpoint_file(run_dir_) : path;
    save_train_checkpoint(first, model_, optimizer_, resolved_, state_, adapter_ ? &*adapter_ : nullptr);
    if (also_best) link_step_name(first, path);
    prune_checkpoints(run_dir_, c_.train.keep_last, path);
    result.last_checkpoint = path;
  }

  // The last backward pass of a step hands each parameter's gradient to the
  // exchange as soon as it is complete (after this rank's micro-batch tree adds
  // its other micro-batches in), and moves the sums in flight on between nodes.
  BackwardHooks exchange_hooks() {
    BackwardHooks hooks;
    hooks.leaf_done = [this](const Var& leaf) {
      if (const auto i = exchange_.index_of(leaf)) {
        tree_.finalize(*i);
        exchange_.ready(*i);
      }
    };
    hooks.after_node = [this] { exchange_.poll(); };
    return hooks;
  }

  // Rank 0's weights, AdamW moments and training state, copied to every rank.
  void share_starting_state() {
    if (comm_.size() == 1) return;
    const ProfileScope profile("share_starting_state", ProfileCategory::comm);
    // Every parameter, frozen ones (a LoRA run's base) included.
    for (const NamedVar& p : model_.named_parameters())
      comm_.broadcast(p.var.value().raw_data(), p.var.value().nbytes());
    for (const NamedTensor& b : model_.named_buffers())
      comm_.broadcast(b.tensor.raw_data(), b.tensor.nbytes());
    for (const NamedTensor& t : optimizer_.state_tensors())
      comm_.broadcast(t.tensor.raw_data(), t.tensor.nbytes());
    std::vector<uint8_t> bytes(sizeof(TrainState));
    std::memcpy(bytes.data(), &state_, sizeof(TrainState));
    comm_.broadcast(bytes);
    std::memcpy(&state_, bytes.data(), sizeof(TrainState));
    optimizer_.set_step_count(state_.optim_step);
    std::vector<int64_t> updates = optimizer_.update_counts();  // each parameter's t
    comm_.broadcast(updates.data(), updates.size() * sizeof(int64_t));
    optimizer_.set_update_counts(updates);
  }

  const RunConfig& c_;
  const TrainOptions& options_;
  Console& console_;
  Communicator& comm_;
  const std::string run_dir_;
  DataFiles data_;
  Shamn model_;
  AdamW optimizer_;
  const std::vector<NamedVar> named_;
  const LrSchedule schedule_;
  GradientTree tree_;
  GradientExchange exchange_;
  TrainState state_;
  std::optional<AdapterIdentity> adapter_;  // a LoRA run's base identity, set by start()
  std::string resolved_;
  std::optional<MetricsLog> metrics_;
  bool plot_warned_ = false;
  std::optional<BatchLoader> loader_;
  std::vector<double> rates_;
  std::deque<double> recent_seconds_;  // the last log.every step times, for tok/s and ETA
  StepMemory memory_;
};

void report_end(const Run& run, const TrainResult& result, Console& console) {
  // Every parameter once, and a gradient and two moments for each trainable one.
  const double state_mib =
      4.0 * static_cast<double>(run.parameter_count() + 3 * run.trainable_count()) / (1 << 20);
  console.say(fmt("done: step %.0f | median %.0f tok/s | first step after %.2f s", double(result.step),
                  result.median_tokens_per_s, result.first_step_s));
  console.say(fmt("peak RSS %.0f MiB (parameters + gradients + 2 AdamW moments: %.0f MiB, ratio %.2f)",
                  double(result.peak_rss_bytes) / (1 << 20), state_mib,
                  double(result.peak_rss_bytes) / (1 << 20) / state_mib));
  constexpr double kMiB = 1 << 20;
  console.say(
      fmt("tensor memory: %.0f MiB live when a step starts, %.0f MiB more kept by the forward for the "
          "backward, peak %.0f MiB more during the step",
          double(result.step_start_bytes) / kMiB, double(result.activation_bytes) / kMiB,
          double(result.step_peak_bytes) / kMiB));
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
  Communicator& comm = world();
  // From the start: under mpirun a stop signal reaches every rank, and one that
  // found a rank without the handlers (waiting for rank 0's weights, or gone
  // while rank 0 writes the last checkpoint) would kill it, and mpirun the rest.
  StopSignal stop;
  check_rank_count(c, comm.size());
  const ScopedProductPrecision precision(product_precision_from_string(c.train.precision, "train.precision"));
  Console console{options.quiet || !comm.is_root(), std::nullopt};
  // Rank 0 alone touches the run directory; it locks it before anything there
  // is read or removed, or, for a new directory, once it is created.
  std::optional<RunDirLock> lock;
  if (comm.is_root() && fs::is_directory(c.train.out_dir)) lock.emplace(c.train.out_dir);
  if (comm.is_root()) check_run_dir(c.train.out_dir, resuming, console);
  DataFiles data = open_data(c);
  check_ranks_agree(comm, c, data);
  Run run(c, options, std::move(data), console, comm);
  run.start(resuming);
  if (comm.is_root() && !lock) lock.emplace(c.train.out_dir);

  if (run.finished())
    console.say("the run is already at train.max_steps = " + std::to_string(c.train.max_steps));
  TrainResult result;
  int64_t steps_here = 0;  // steps run by this process, for the profiler's trace window
  try {
    while (!run.finished()) {
      profile_begin_step(++steps_here);
      // The step alone: evaluation and checkpoints have rows of their own, so
      // the roofline of --profile compares the step with the work inside it.
      const StepStats s = profiled("train_step", ProfileCategory::step, [&] { return run.step(); });
      if (result.first_step_s == 0) result.first_step_s = started.seconds();
      run.report(s);
      if (!run.evaluate_and_checkpoint(stop, result)) break;
    }
  } catch (const InputError& e) {
    stop_after_io_error(e, c.train.out_dir);
  }
  // Every rank keeps its handlers until rank 0's last checkpoint is written.
  comm.check_in("the last checkpoint");

  result.step = run.state().step;
  result.best_val_loss = run.state().best_val_loss;
  result.median_tokens_per_s = median(run.rates());
  result.peak_rss_bytes = peak_rss_bytes();
  result.step_start_bytes = run.memory().step_start_bytes;
  result.activation_bytes = run.memory().activation_bytes;
  result.step_peak_bytes = run.memory().step_peak_bytes;
  report_end(run, result, console);
  return result;
}

}  // namespace shamn
