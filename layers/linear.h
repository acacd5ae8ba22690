#pragma once
#include "layers/lora.h"

namespace shamn {

// Dense y = x W^T (+ bias). Parameters: weight [out, in], bias [out] (when enabled).
// Init: weight ~ N(0, init_std^2) (default 1/sqrt(in)) under InitScheme::fan_in,
// N(0, how.std^2) under normal; bias 0. May carry a LoRA adapter (layers/lora.h),
// added to its output.
class Linear : public LoraHost {
 public:
  Linear(int64_t in, int64_t out, bool bias, double init_std = 0.0);
  Var forward(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  Var weight_, bias_;
  double init_std_;
};

}  // namespace shamn
