#pragma once
#include "core/model_config.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace shamn {

// SPEC 1.5: product-key memory (Lample et al., 2019). q = query(u) splits into
// q1, q2 (dh each); the top-k of keys1 . q1 and keys2 . q2 give k*k candidate
// slots I_p * n + J_q scored a_p + c_q; the best k are softmax-weighted over
// values[slot]. Parameters: query (Linear D -> 2*dh, bias), keys1, keys2 [n, dh]
// (init N(0, 1/dh)), values [n^2, D] (init N(0, 1/D)).
class MemoryBank : public Module {
 public:
  explicit MemoryBank(const MemoryOptions& options);
  Var forward(const Var& u) const;  // [..., D] -> [..., D]
  // residual + forward(u) in one pass (the lookup adds it), the same bits.
  Var forward(const Var& u, const Var& residual) const;
  const MemoryOptions& options() const { return options_; }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  MemoryOptions options_;
  Linear* query_;
  Var keys1_, keys2_, values_;
};

}  // namespace shamn
