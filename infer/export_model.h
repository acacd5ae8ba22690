#pragma once
// `shamn export`: a checkpoint (training or model-only, SPEC section 4) to a
// .shq model file. Matrices that feed dot products are quantised row-wise
// along their input dim; everything else stays as trained (see
// export_dtype and infer/README.md for which and why).
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "core/tensor.h"
#include "infer/shq_format.h"

namespace shamn {

// `export ADAPTER.h5 --base BASE.h5 --merge`: a LoRA adapter checkpoint's
// factors folded into the base's dense matrices before they are quantised,
// W + scale B A (each entry's sum over the rank in double, rounded once to
// f32), so the file runs at the base's speed with no adapter. Block-sparse
// targets are refused: their merged matrix would be dense.
// The merged file keeps the base checkpoint's step and config.
struct MergeAdapter {
  std::string checkpoint;  // "" = no merge
  int64_t rank = 0;        // every factor pair's (checked)
  double alpha = 0;        // the term is (alpha / rank) B A
  bool rslora = false;     // or (alpha / sqrt(rank)) B A
};

struct ExportOptions {
  ShqQuant quant = ShqQuant::int8;
  std::string tokenizer_text;  // "" = no tokenizer embedded
  MergeAdapter merge;          // the base is the checkpoint export reads
};

// The dtype tensor `name` (a SPEC name) of a model with `config` is stored as under `quant`.
ShqDType export_dtype(const std::string& name, ShqQuant quant, const ModelConfig& config);

// The whole file image (its source_id: the identity of the tensors it was
// made from, merged ones included). Before returning, it is loaded back through the
// runtime's own checks (ShqFile + InferModel), so export never writes a file
// the runtime would reject.
std::vector<uint8_t> export_model_image(const std::string& checkpoint, const ExportOptions& options);
// Writes the image atomically to `out`.
void export_model(const std::string& checkpoint, const ExportOptions& options, const std::string& out);

ShqQuant shq_quant_from_string(const std::string& name);  // "f32" | "int8" | "int4"

// The identity of a checkpoint's model tensors (core/tensor_checksum.h): what
// export stores as the .shq file's source_id, and what a LoRA adapter trained
// on that checkpoint records as its base.
uint32_t checkpoint_source_id(const std::string& checkpoint);

// A LoRA adapter checkpoint's /model/<matrix>/lora_a and lora_b as an adapter
// file (infer/lora_adapter.h): rank, alpha, rslora and the base's identity as the
// adapter checkpoint records them (train/adapter_checkpoint.h reads them);
// quant f32 or int8 (A as q8_0x16 tiles, B f32).
struct AdapterExport {
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
  uint32_t base_id = 0;
  ShqQuant quant = ShqQuant::int8;
};
std::vector<uint8_t> export_adapter_image(const std::string& adapter_checkpoint, const AdapterExport& a);

// A float32 (or, for i32, int32) tensor as the bytes of `dtype`: quantised row
// by row along its last dim, tiled for the x16 dtypes (rows: all but the last
// dim; block-sparse values already in [nob, b, a, b] order).
std::vector<uint8_t> shq_tensor_data(const Tensor& t, ShqDType dtype);

}  // namespace shamn
