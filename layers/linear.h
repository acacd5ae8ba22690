#pragma once
#include "layers/module.h"

namespace shamn {

// Dense y = x W^T (+ bias). Parameters: weight [out, in], bias [out] (when enabled).
// Init: weight ~ N(0, init_std^2) (default 1/sqrt(in)), bias 0.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, double init_std = 0.0);
  Var forward(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix) override;
  Var weight_, bias_;
  double init_std_;
};

}  // namespace shamn
