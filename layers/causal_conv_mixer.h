#pragma once
#include "core/model_config.h"
#include "layers/block_sparse_linear.h"
#include "layers/module.h"

namespace shamn {

// SPEC 1.4: c[t, d] = sum_i conv[d, i] * u[t - i, d] (causal, per sequence;
// conv[d, 0] weighs the current token), Mixer(u) = out(silu(c)).
// Parameters: conv [D, K] (init U(-1/sqrt(K), 1/sqrt(K))), out (BlockSparseLinear D -> D).
class CausalConvMixer : public Module {
 public:
  CausalConvMixer(const MixerOptions& options, double out_scale);
  Var forward(const Var& u) const;  // [B, T, D] -> [B, T, D]
  // residual + forward(u) in one pass (the out projection adds it), the same bits.
  Var forward(const Var& u, const Var& residual) const;
  const Var& conv() const { return conv_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  MixerOptions options_;
  Var conv_;
  BlockSparseLinear* out_;
};

}  // namespace shamn
