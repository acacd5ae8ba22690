// libFuzzer target for HDF5 checkpoints (core/hdf5_file.h, train/model_checkpoint.h,
// train/train_checkpoint.h): the input is the whole file. It is opened with
// Hdf5Reader, its config attribute read (read_checkpoint_config), every dataset
// listed and read, and then loaded into a fixed tiny model and its AdamW as a
// resume would (load_train_checkpoint) and as train.init_from would
// (load_model_tensors). The seed is a training checkpoint of that model
// (tests/fuzz/make_checkpoint_seed.cpp). libhdf5 itself is not instrumented:
// coverage guides only through our code, but ASan still sees its memory errors.
// Every failure must be a shamn::InputError; anything else is a finding.
// Build and run: tests/fuzz/build_and_run.sh checkpoint SECONDS.
#include <cstdint>
#include <memory>

#include "core/check.h"
#include "core/hdf5_file.h"
#include "core/parallel.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "tests/fuzz/checkpoint_model.h"
#include "tests/fuzz/fuzz_fail.h"
#include "tests/fuzz/fuzz_scratch.h"
#include "train/model_checkpoint.h"
#include "train/train_checkpoint.h"

namespace {

struct Target {
  shamn::Shamn model{shamn::ModelConfig::from_toml(shamn::fuzz::kCheckpointModelToml, "fuzz")};
  shamn::AdamW optimizer{shamn::split_weight_decay(model.named_parameters(), 0.1)};
};
Target* target = nullptr;

void read_everything(const std::string& path) {
  const shamn::Hdf5Reader reader(path);
  try {
    shamn::read_checkpoint_config(reader);
  } catch (const shamn::InputError&) {
  }
  try {
    for (const char* name : {"step", "optim_step", "data_seed"}) reader.int_attribute(name);
    for (const char* name : {"best_val_loss", "elapsed_s"}) reader.float_attribute(name);
  } catch (const shamn::InputError&) {
  }
  try {
    const auto all = reader.datasets("/model");
    for (size_t i = 0; i < all.size() && i < 64; ++i) reader.read_tensor(all[i]);
  } catch (const shamn::InputError&) {
  }
  try {
    shamn::load_model_tensors(reader, target->model);
  } catch (const shamn::InputError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  shamn::set_num_threads(1);
  target = new Target;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = shamn::fuzz::write_scratch("checkpoint.h5", data, size);
  try {
    read_everything(path);
  } catch (const shamn::InputError&) {
  }
  try {
    shamn::load_train_checkpoint(path, target->model, target->optimizer);
  } catch (const shamn::InputError&) {
  }
  return 0;
}
