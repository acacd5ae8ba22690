#pragma once
// A LoRA adapter beside a base .shq model. Each adapted matrix W [out, in]
// carries two low-rank factors, A [r, in] and B [out, r], and the runtime
// computes
//   y = W x + bias + (alpha / r) * B (A x)
// as training does (the [lora] section, configs/README.md). The adapter file
// is a .shq whose config text is its [lora] table (rank, alpha), whose tensors
// are `<matrix>.lora_a` / `<matrix>.lora_b` (each f32 or q8_0x16; export
// writes an int8 adapter as q8 A and f32 B, which the runtime quantises per
// output row when it loads a quantised A), and whose
// source_id is the base's: an adapter loads only beside the base it was
// trained on. Adaptable matrices, per layer l (expert e):
//   layers.l.mixer.out, layers.l.memory.query, layers.l.moe.router_group,
//   layers.l.moe.router_expert, layers.l.moe.experts.e.up, ...experts.e.down
#include <cstdint>
#include <string>
#include <vector>

#include "infer/few_rows_q8.h"
#include "infer/low_rank_q8.h"
#include "infer/shq_file.h"
#include "infer/weight_matrix.h"

namespace shamn {

class InferModel;

struct LoraFactors {
  WeightMatrix a;         // [r, in], as stored
  std::vector<float> bt;  // beside a f32 A: B transposed, [r, out], f32: r axpys add B t
  LowRankQ8 bq;           // beside a quantised A: B in int8, quantised per output row
  float scale = 0;        // alpha / r (rsLoRA: alpha / sqrt(r))
  FewRowsQ8 a8;           // a quantised A of rank <= 8 again, for batched rows where the kernel level has it
};

// One layer's adapted matrices; null where the adapter leaves a matrix alone.
struct LoraLayer {
  const LoraFactors* mixer_out = nullptr;
  const LoraFactors* query = nullptr;
  const LoraFactors* router_group = nullptr;
  const LoraFactors* router_expert = nullptr;
  std::vector<const LoraFactors*> up, down;  // per expert
};

class LoraAdapter {
 public:
  // Checks the file against the base: the source_id, every tensor's name,
  // shape and dtype, both factors of every matrix; an InputError names the
  // file and tensor. It then serves any export of the same base checkpoint
  // (f32, int8 or int4: the same source_id).
  LoraAdapter(ShqFile file, const InferModel& base);
  LoraAdapter(LoraAdapter&&) noexcept = default;
  LoraAdapter(const LoraAdapter&) = delete;

  const std::string& path() const { return file_.path(); }
  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  bool rslora() const { return rslora_; }  // the term's scale is alpha / sqrt(rank), not alpha / rank
  uint64_t base_id() const { return file_.header().source_id(); }
  const LoraLayer& layer(size_t l) const { return layers_[l]; }
  size_t adapted_matrices() const { return factors_.size(); }
  uint64_t weight_bytes() const;  // every tensor of the file
  // What one decoded token reads of the factors as the runtime holds them:
  // every adapted matrix it passes, the experts' as k of E (each expert's share
  // alike, as InferModel::weight_bytes_per_token counts). B packed; A as stored,
  // or its few-rows copy where the runtime reads that instead (rank <= 8 beside
  // a quantised base, at a kernel level with few_rows_q8_available()).
  uint64_t bytes_per_token() const { return few_rows_q8_available() ? bytes_few_rows_ : bytes_stored_; }

 private:
  ShqFile file_;
  int64_t rank_ = 0;
  double alpha_ = 0;
  bool rslora_ = false;
  uint64_t bytes_stored_ = 0,
           bytes_few_rows_ = 0;       // per token: A as stored, A's few-rows copy where it has one
  std::vector<LoraFactors> factors_;  // reserved up front: LoraLayer points into it
  std::vector<LoraLayer> layers_;
};

// The [lora] table an adapter file carries as its config text.
std::string lora_config_toml(int64_t rank, double alpha, bool rslora = false);
// Whether a .shq file's config text is an adapter's (a model's is [model] tables).
// `source` names the text in a syntax error ("m.shq (embedded config)").
bool is_lora_config(const std::string& config_toml, const std::string& source);

}  // namespace shamn
