#pragma once
// A training run's whole config: the SPEC's [model] tables plus the [data],
// [train], [optim], [lora] and [log] sections documented in configs/README.md. Loading is
// strict (unknown keys, wrong types, missing required keys and out-of-range values
// are errors naming the file, line and key), and to_toml() writes the resolved
// config back with every default filled in, which is what a run directory and
// every checkpoint keep.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "layers/init.h"
#include "layers/lora.h"

namespace shamn {

class ConfigTable;

struct DataConfig {
  std::string train_path;       // required
  std::string val_path;         // "" = no evaluation
  std::string format = "llmc";  // "llmc" (header) or "u16" (headerless uint16)
  std::string tokenizer;        // "" = none; generation needs one
};

struct TrainConfig {
  int64_t batch_size = 0;        // required
  int64_t seq_len = 0;           // required
  int64_t grad_accum = 1;        // micro-batches per optimizer step
  int64_t max_steps = 0;         // required
  int64_t seed = 1;              // model init and data order
  std::string out_dir;           // required: the run directory
  int64_t checkpoint_every = 0;  // 0 = only at the end
  int64_t keep_last = 3;
  int64_t eval_every = 0;  // 0 = only at the end
  int64_t eval_batches = 20;
  int64_t max_bad_steps = 5;  // non-finite steps in a row before the run stops
  std::string init_from;      // "" = fresh init; else a (model-only) checkpoint
  // A fresh init's scheme ("normal" or "fan_in", layers/init.h) and normal's std.
  std::string init = "normal";
  double init_std = 0.02;
  bool init_scale_residual = false;  // normal: residual outputs at init_std / sqrt(2L)
  bool prefetch = true;
  // Operands of the matmuls and block-sparse products: "f32" or "bf16"
  // (core/product_precision.h).
  std::string precision = "f32";
  // Data parallel: sum gradient buckets over the ranks while the backward pass
  // runs (train/grad_exchange.h), in buckets of about bucket_mib MiB.
  bool overlap_exchange = true;
  double bucket_mib = 4;
};

struct OptimConfig {
  double lr = 0.0;  // required
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = no clipping
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
};

struct LogConfig {
  int64_t every = 10;             // steps between log lines / metrics records
  std::string progress = "auto";  // "auto" (a live line on a terminal), "always", "never"
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  LoraOptions lora;  // rank 0: no adapters (alpha defaults to rank)
  LogConfig log;

  WeightInit weight_init() const;  // train.init, init_std, init_scale_residual

  static RunConfig from_table(const ConfigTable& table);
  // Reads `path`, applies the `--set key=value` overrides in order, then loads.
  static RunConfig from_file(const std::string& path, const std::vector<std::string>& overrides);
  static RunConfig from_toml(const std::string& text, const std::string& origin);

  static const std::set<std::string>& known_keys();  // every key and table

  void validate() const;  // throws ConfigError naming the key
  std::string to_toml() const;
  int64_t tokens_per_step() const { return train.batch_size * train.seq_len * train.grad_accum; }
};

// The settings that differ between two configs, "table.key old -> new" in
// to_toml()'s order ("(unset)" for a key one side leaves out); train.out_dir,
// which a resume takes from its directory, is left out.
std::vector<std::string> changed_settings(const RunConfig& before, const RunConfig& after);

}  // namespace shamn
