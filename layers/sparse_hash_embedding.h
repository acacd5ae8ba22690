#pragma once
#include "core/model_config.h"
#include "layers/module.h"

namespace shamn {

// SPEC 1.2: token t embeds as sum_j importance[t, j] * table[bucket_index[t, j]],
// and the tied head scores every token the same way from the bucket scores
// table . z, never materialising a [V, D] matrix.
// Parameters: table [buckets, D] (init N(0, 0.02^2)), importance [V, h] (init 1);
// buffer: bucket_index int32 [V, h] (SPEC's mix64 rule at init; loaded, never
// recomputed, afterwards).
class SparseHashEmbedding : public Module {
 public:
  explicit SparseHashEmbedding(const EmbedOptions& options);

  Var forward(const Tensor& tokens) const;  // int32 [B, T] -> [B, T, D]
  Var logits(const Var& z) const;           // [..., D] -> [..., V]
  // Mean cross-entropy of logits(z) against targets, fused (training hot path).
  Var cross_entropy(const Var& z, const Tensor& targets) const;

  const EmbedOptions& options() const { return options_; }
  const Var& table() const { return table_; }
  const Var& importance() const { return importance_; }
  const Tensor& bucket_index() const { return bucket_index_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  EmbedOptions options_;
  Var table_, importance_;
  Tensor bucket_index_;
};

}  // namespace shamn
