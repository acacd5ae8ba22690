#include "layers/linear.h"

#include <cmath>

#include "autograd/ops.h"
#include "layers/init.h"

namespace shamn {

Linear::Linear(int64_t in, int64_t out, bool bias, double init_std)
    : LoraHost(in, out),
      weight_(register_parameter("weight", Tensor::zeros({out, in}))),
      init_std_(init_std > 0 ? init_std : 1.0 / std::sqrt(static_cast<double>(in))) {
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({out}));
}

void Linear::init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {
  Tensor w = weight_.value();
  init_normal(w, seed, prefix + "weight", how.pick(init_std_));
  if (bias_.defined()) bias_.value().zero();
  init_lora_if_any(seed, prefix);
}

Var Linear::forward(const Var& x) const {
  Var y = matmul(x, weight_, false, true);
  return add_lora_output(x, bias_.defined() ? add(y, bias_) : y);
}

}  // namespace shamn
