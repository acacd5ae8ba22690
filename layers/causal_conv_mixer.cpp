#include "layers/causal_conv_mixer.h"

#include <cmath>

#include "autograd/ops.h"
#include "autograd/ops_causal_conv.h"
#include "layers/init.h"

namespace shamn {

CausalConvMixer::CausalConvMixer(const MixerOptions& o, double out_scale) : options_(o) {
  o.validate();
  conv_ = register_parameter("conv", Tensor::zeros({o.dim, o.kernel}));
  out_ = &register_module("out", std::make_unique<BlockSparseLinear>(o.out, out_scale));
}

void CausalConvMixer::init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {
  Tensor c = conv_.value();
  if (how.scheme == InitScheme::normal)
    init_normal(c, seed, prefix + "conv", how.std);
  else
    init_uniform(c, seed, prefix + "conv", 1.0 / std::sqrt(static_cast<double>(options_.kernel)));
}

// SiLU inside the output projection: its output is never kept (experiments/training_memory.md).
Var CausalConvMixer::forward(const Var& u) const {
  return out_->forward(causal_conv(u, conv_), InputActivation::silu);
}

Var CausalConvMixer::forward(const Var& u, const Var& residual) const {
  return out_->forward(causal_conv(u, conv_), InputActivation::silu, residual);
}

}  // namespace shamn
