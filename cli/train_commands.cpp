// `shamn train` (a run from a TOML config, or resumed from its run directory) and
// `shamn info` (what a checkpoint holds).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/profile_flags.h"
#include "cli/shq_info.h"
#include "core/checksum.h"
#include "core/hdf5_file.h"
#include "core/lora_scale.h"
#include "layers/lora.h"
#include "layers/parameter_counts.h"
#include "layers/shamn_model.h"
#include "train/adapter_checkpoint.h"
#include "train/communicator.h"
#include "train/model_checkpoint.h"
#include "train/run_config.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace shamn::cli {

namespace {

struct TrainArgs {
  std::string config, resume;
  std::vector<std::string> overrides;
  ProfileFlags profile;
};

void run_train(const TrainArgs& a) {
  SHAMN_INPUT_CHECK(!a.config.empty() || !a.resume.empty(),
                    "shamn train needs a CONFIG, or --resume RUN_DIR");
  // Resuming without a config uses the one the run directory keeps.
  const std::string config_path =
      !a.config.empty() ? a.config : (std::filesystem::path(a.resume) / "config.toml").string();
  SHAMN_INPUT_CHECK(!a.config.empty() || std::filesystem::is_regular_file(config_path), "--resume ", a.resume,
                    ": no run here (no config.toml; give the out_dir of an earlier shamn train)");
  const RunConfig config = RunConfig::from_file(config_path, a.overrides);
  TrainOptions options;
  options.resume_dir = a.resume;
  const std::string run_dir = a.resume.empty() ? config.train.out_dir : a.resume;
  begin_profile(a.profile);
  train(config, options);
  // Rank 0 speaks for a data-parallel run: its table is the one printed.
  const std::string trace = (std::filesystem::path(run_dir) / "profile.json").string();
  if (world().is_root())
    end_profile(a.profile, trace, stdout);
  else
    end_rank_profile(a.profile, trace, world().rank());
}

// Every tensor's CRC-32 and the exact training state: two checkpoints are bitwise
// the same run exactly when these listings are equal (elapsed time is left out).
void print_tensor_digest(const Hdf5Reader& reader, bool training) {
  std::printf("\n# tensors (name, dtype and shape, crc32 of the values)\n");
  for (const char* group : {"/model", "/optim"}) {
    for (const std::string& p : reader.datasets(group)) {
      const Tensor t = reader.read_tensor(p);
      std::printf("%s.%s %s %08x\n", group + 1, dotted_name(group, p).c_str(), t.str().c_str(),
                  crc32_bytes(t.raw_data(), t.nbytes()));
    }
  }
  if (!training) return;
  std::printf("# state\n");
  for (const char* name : {"step", "optim_step", "data_seed", "data_position", "bad_steps", "tokens_seen"})
    std::printf("%s %" PRId64 "\n", name, reader.int_attribute(name));
  std::printf("best_val_loss %.17g\n", reader.float_attribute("best_val_loss"));
  // Which parameters AdamW has not yet updated, and which reached ones it has
  // updated fewer times than the step count (its t): one name a line, absent in
  // older checkpoints. A resumed run depends on both, so two equal runs agree on them.
  for (const char* name : {"optim_unreached", "optim_late_updates"}) {
    if (!reader.has_attribute(name)) continue;
    const std::string lines = reader.string_attribute(name);
    std::printf("%s %lld names, crc32 %08x\n", name,
                static_cast<long long>(std::count(lines.begin(), lines.end(), '\n')),
                crc32_bytes(lines.data(), lines.size()));
  }
}

// A LoRA run's checkpoint: the adapters (checked against the model its config
// describes) and the base they belong to.
void print_adapter_info(const Hdf5Reader& reader, const ModelConfig& config) {
  const RunConfig run =
      RunConfig::from_toml(reader.string_attribute("config"), reader.path() + " (attribute config)");
  Shamn model(config);
  attach_lora(model, config, run.lora);
  load_model_tensors(reader, model, TensorSet::adapters);  // also verifies every tensor's checksum
  const AdapterIdentity id = read_adapter_identity(reader);
  int64_t adapters = 0;
  for (const NamedVar& p : lora_parameters(model)) adapters += p.var.numel();
  std::printf("checkpoint      %s\n", reader.path().c_str());
  std::printf("kind            LoRA adapters + optimizer state (resumable beside their base)\n");
  std::printf("base            %s (crc32 %08x)\n", id.base_file.c_str(), id.base_crc32);
  std::printf("lora            rank %" PRId64 ", alpha %g%s, %zu layers", id.lora.rank, id.lora.alpha,
              lora_scale_note(id.lora.rslora), lora_parameters(model).size() / 2);
  if (run.lora.dropout > 0) std::printf(", trained with dropout %g", run.lora.dropout);
  std::printf("\n");
  std::printf("step            %" PRId64 "\n", reader.int_attribute("step"));
  std::printf("file size       %.1f MiB\n",
              static_cast<double>(std::filesystem::file_size(reader.path())) / (1 << 20));
  std::printf("parameters      %" PRId64 " adapter (%.2f MiB f32), %" PRId64 " in the base\n", adapters,
              static_cast<double>(adapters) * 4 / (1 << 20), model.parameter_count() - adapters);
}

void run_info(const std::string& path, bool tensors) {
  if (is_shq_file(path)) {
    SHAMN_INPUT_CHECK(!tensors, "--tensors lists a checkpoint's tensors; '", path,
                      "' is a .shq file (its tensors are checksummed on open)");
    return print_shq_info(path);
  }
  const Hdf5Reader reader(path);
  const ModelConfig config = read_checkpoint_config(reader);
  if (is_adapter_checkpoint(reader)) {
    print_adapter_info(reader, config);
    std::printf("\n# config\n%s", reader.string_attribute("config").c_str());
    if (tensors) print_tensor_digest(reader, true);
    return;
  }
  Shamn model(config);
  load_model_tensors(reader, model);  // also verifies every tensor's checksum
  const ParameterCounts counts = count_parameters(model);
  const bool training = is_train_checkpoint(path);
  std::printf("checkpoint      %s\n", path.c_str());
  std::printf("kind            %s\n",
              training ? "training (model + optimizer state; resumable)" : "model only");
  std::printf("format_version  %" PRId64 "\n", reader.int_attribute("format_version"));
  std::printf("step            %" PRId64 "\n", reader.int_attribute("step"));
  std::printf("file size       %.1f MiB (%" PRIuMAX " bytes)\n",
              static_cast<double>(std::filesystem::file_size(path)) / (1 << 20),
              static_cast<uintmax_t>(std::filesystem::file_size(path)));
  std::printf("parameters      %" PRId64 " stored (%.1f MiB f32), %" PRId64 " touched per token (%.1f%%)\n",
              counts.stored, static_cast<double>(counts.stored) * 4 / (1 << 20), counts.touched_per_token,
              100.0 * static_cast<double>(counts.touched_per_token) / static_cast<double>(counts.stored));
  std::printf("buffers         %" PRId64 " int32 elements\n", counts.buffers);
  if (training) {
    std::printf("tokens seen     %" PRId64 "\n", reader.int_attribute("tokens_seen"));
    std::printf("train time      %.1f s\n", reader.float_attribute("elapsed_s"));
    const double best = reader.float_attribute("best_val_loss");
    if (std::isfinite(best)) std::printf("best val loss   %.4f (perplexity %.2f)\n", best, std::exp(best));
  }
  std::printf("\n# config\n%s", reader.string_attribute("config").c_str());
  if (tensors) print_tensor_digest(reader, training);
}

}  // namespace

void register_train_commands(CLI::App& app) {
  auto train = std::make_shared<TrainArgs>();
  CLI::App* tc =
      app.add_subcommand("train", "train a model from a TOML config (configs/README.md documents every key)");
  tc->add_option("config", train->config, "TOML config (optional with --resume); not a model file")
      ->check(CLI::ExistingFile);
  tc->add_option("--set", train->overrides,
                 "override a config key, e.g. --set train.max_steps=100 (repeatable; TOML values)")
      ->allow_extra_args(false);
  tc->add_option("--resume", train->resume, "continue the run in this directory from its newest checkpoint")
      ->check(CLI::ExistingDirectory);
  add_profile_flags(tc, train->profile, "RUN_DIR/profile.json");
  tc->callback([train] { run_train(*train); });

  struct InfoArgs {
    std::string checkpoint;
    bool tensors = false;
  };
  auto info = std::make_shared<InfoArgs>();
  CLI::App* ic = app.add_subcommand(
      "info", "print what a checkpoint, model file or adapter file holds: config, step, sizes, parameters");
  ic->add_option(
        "file", info->checkpoint,
        "checkpoint (.h5: training, model-only or LoRA adapters), model file or LoRA adapter file (.shq)")
      ->required();
  ic->add_flag("--tensors", info->tensors,
               "also list every tensor's CRC-32 and the exact training state (diff two listings "
               "to compare checkpoints bitwise)");
  ic->callback([info] { run_info(info->checkpoint, info->tensors); });
}

}  // namespace shamn::cli
