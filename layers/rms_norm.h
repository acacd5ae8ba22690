#pragma once
#include "layers/module.h"

namespace shamn {

// SPEC 1.1: y = x / sqrt(mean(x^2) + 1e-5) * gain. Parameter: gain [D] (init 1).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  Var forward(const Var& x) const;
  const Var& gain() const { return gain_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  Var gain_;
  double eps_;
};

}  // namespace shamn
