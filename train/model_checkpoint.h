#pragma once
// Model weights in the HDF5 layout of SPEC section 4: /model/<name with . -> />,
// f32 parameters and int32 buffers, root attributes `config` (resolved TOML),
// `format_version` = 1 and `step`.
#include <cstdint>
#include <string>

#include "core/hdf5_file.h"
#include "core/model_config.h"
#include "layers/module.h"

namespace shamn {

// Which of a model's tensors a file holds: all of them; a LoRA run's adapters
// only (layers/lora.h: the parameters named *.lora_a, *.lora_b); or every tensor
// but the adapters (the base an adapted model was built on). Without adapters,
// `base` is `all`.
enum class TensorSet { all, adapters, base };

// Writes the parameters and buffers of `model` in `set` under /model/ (the writer
// commits nothing; the caller adds what else it needs, then commits).
void write_model_tensors(Hdf5Writer& writer, const Module& model, TensorSet set = TensorSet::all);
// A model-only checkpoint: tensors, config, format_version, step; atomic.
void save_model_checkpoint(const std::string& path, const Module& model, const std::string& config_toml,
                           int64_t step);

// Reads and validates the [model] tables of the `config` attribute.
ModelConfig read_checkpoint_config(const Hdf5Reader& reader);
// Copies every tensor of `set` into `model`; a missing, extra, mis-shaped or
// mistyped tensor is an error naming it. Nothing is modified unless all tensors
// check out. An adapter checkpoint (train/adapter_checkpoint.h) read for
// anything but its adapters is an error that says what it is.
void load_model_tensors(const Hdf5Reader& reader, Module& model, TensorSet set = TensorSet::all);

}  // namespace shamn
