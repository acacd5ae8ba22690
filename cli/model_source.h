#pragma once
// What `shamn eval` and `shamn bench` accept as a model: a .shq file (run by
// the inference runtime) or an HDF5 checkpoint (run by the autograd model),
// told apart by the file's first bytes.
#include <memory>
#include <string>

#include "core/model_config.h"
#include "infer/evaluate.h"
#include "infer/infer_model.h"
#include "infer/lora_adapter.h"
#include "layers/shamn_model.h"

namespace shamn::cli {

struct ModelSource {
  std::string path;
  ModelConfig config;
  std::unique_ptr<InferModel> runtime;   // a .shq file
  std::unique_ptr<Shamn> autograd;       // a checkpoint
  std::unique_ptr<LoraAdapter> adapter;  // --adapter (runtime only)
  std::string kind() const;              // "f32" | "int8" | "int4" | "checkpoint"
  // Logits for every position of a window; the runtime starts from an empty state.
  LogitFunction logit_function() const;
  // Each position's loss against the next tokens: the runtime's fused loss
  // (no logits stored), or the checkpoint's logits reduced by logsumexp.
  LossFunction loss_function() const;
  // How many windows loss_function may run at once: one a thread for the
  // runtime (its calls share nothing but the weights); the autograd model one.
  int64_t concurrent_windows() const;
};

// adapter: a LoRA adapter file to run with a .shq model ("" = none).
ModelSource open_model_source(const std::string& path, const std::string& adapter = "");
bool is_shq_file(const std::string& path);
// --kernel scalar|avx2|avx512 ("" = keep the CPU's best).
void apply_kernel_flag(const std::string& kernel);

}  // namespace shamn::cli
