#pragma once
// Full training checkpoints: the SPEC section 4 model layout plus what an exact
// resume needs. On top of /model/ and the root attributes `config`,
// `format_version` and `step`, a training checkpoint holds
//   /optim/m/<name>, /optim/v/<name>   AdamW moments (f32, parameter shapes)
//   attributes optim_step (AdamW's t), optim_unreached (the parameters no
//   gradient has reached yet, one name a line), data_seed and data_position (the
//   batch sampler is a pure function of the two), best_val_loss, bad_steps,
//   tokens_seen and elapsed_s.
// Every dataset carries a CRC-32 checked on load (core/hdf5_file.h); files are
// written to a temporary name, fsynced and renamed, so a crash at any point
// leaves the previous checkpoint intact.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "layers/module.h"
#include "optim/adamw.h"
#include "train/adapter_checkpoint.h"

namespace shamn {

struct TrainState {
  int64_t step = 0;        // optimizer steps taken (skipped non-finite ones included)
  int64_t optim_step = 0;  // AdamW's bias-correction step
  uint64_t data_seed = 0;
  uint64_t data_position = 0;  // training batches drawn so far
  double best_val_loss = std::numeric_limits<double>::infinity();
  int64_t bad_steps = 0;  // consecutive non-finite steps
  int64_t tokens_seen = 0;
  double elapsed_s = 0.0;  // training wall time, excluding evaluation
};

// With `adapter` (a LoRA run), the file holds the adapters and their identity
// only (train/adapter_checkpoint.h); without, the whole model.
void save_train_checkpoint(const std::string& path, const Module& model, const AdamW& optimizer,
                           const std::string& config_toml, const TrainState& state,
                           const AdapterIdentity* adapter = nullptr);

bool is_train_checkpoint(const std::string& path);  // has optimizer state

// Restores model, optimizer and state; `model` and `optimizer` are left untouched
// when anything fails to check out (missing tensor, bad shape, checksum). With
// `adapter` (a LoRA run, its base already in `model`), the file must be an
// adapter checkpoint of that base and settings, and only the adapters are read.
TrainState load_train_checkpoint(const std::string& path, Module& model, AdamW& optimizer,
                                 const AdapterIdentity* adapter = nullptr);

// Checkpoints in a run directory are ckpt_<step, 8 digits>.h5, plus best.h5.
std::string checkpoint_file(const std::string& run_dir, int64_t step);
std::string best_checkpoint_file(const std::string& run_dir);
// The step checkpoints in `run_dir`, oldest first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// The trainer writes a new best as best.h5 first, then links its step name to
// it: a run stopped between the two leaves best.h5 a later step than every step
// checkpoint. Returns that step's checkpoint name, which best.h5 should have
// too, or "" when best.h5 is absent, not a training checkpoint, damaged, or not
// ahead of the step checkpoints.
std::string step_name_best_lacks(const std::string& run_dir);
// Deletes all but the newest `keep` step checkpoints up to `written` (the one
// just saved, which is never deleted); checkpoints of later steps than it are
// left alone (best.h5 is never deleted).
void prune_checkpoints(const std::string& run_dir, int64_t keep, const std::string& written);
// Moves `path` (a checkpoint that does not load) out of the rotation to
// <path>.damaged, or <path>.damaged.N where that exists; returns the new name.
std::string set_aside_damaged_checkpoint(const std::string& path);
// Removes temporary files left by a process killed while writing; returns how many.
int remove_stale_temp_files(const std::string& run_dir);

}  // namespace shamn
