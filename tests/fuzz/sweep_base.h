#pragma once
// The base run config the sweep fuzz target writes next to each sweep file
// (its seeds say base = "base.toml"); the regression tests write it too.
#include <string>

#include "tests/mini_model.h"

namespace shamn::fuzz {

// A small complete run config, quick to parse once per point.
inline std::string sweep_base_toml() {
  return std::string(test::kMiniModelToml) + R"([data]
train_path = "train.bin"
val_path = "val.bin"
[train]
batch_size = 2
seq_len = 8
max_steps = 10
out_dir = "run"
[optim]
lr = 1e-3
)";
}

}  // namespace shamn::fuzz
