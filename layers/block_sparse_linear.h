#pragma once
#include "autograd/ops_block_sparse.h"
#include "core/kernels/block_sparse.h"
#include "core/model_config.h"
#include "core/rng.h"
#include "layers/lora.h"

namespace shamn {

// SPEC 1.3: y = x W^T + bias, W stored as `a` active b x b blocks per block row.
// Parameters: values [nob, a, b, b], bias [out]; buffer: col_index int32 [nob, a]
// (drawn at init, sorted ascending, saved in checkpoints).
// Init (InitScheme::fan_in): values ~ N(0, init_scale^2 / (a*b)): each output sums
// a*b inputs, so unit-variance inputs give outputs of variance init_scale^2 at any
// sparsity; InitScheme::normal uses init_scale only with scale_residual
// (layers/README.md). May carry a LoRA adapter (layers/lora.h): dense and
// low-rank, beside the sparse product.
class BlockSparseLinear : public LoraHost {
 public:
  explicit BlockSparseLinear(const BlockSparseOptions& options, double init_scale = 1.0);
  Var forward(const Var& x) const;
  // forward(act(x)), the activation applied inside the product and not kept
  // (autograd/ops_block_sparse.h), unless a LoRA adapter reads act(x) too.
  Var forward(const Var& x, InputActivation act) const;
  // add(residual, forward(x, act)), the residual taken by the product's tiles
  // as they are stored when no adapter is attached: the same bits either way.
  Var forward(const Var& x, InputActivation act, const Var& residual) const;

  const BlockSparseDims& dims() const { return dims_; }
  const Var& values() const { return values_; }
  const Tensor& col_index() const { return col_index_; }
  const Var& bias() const { return bias_; }
  int64_t active_weights() const { return dims_.value_count(); }

 private:
  void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) override;
  BlockSparseDims dims_;
  double init_scale_;
  Var values_, bias_;
  Tensor col_index_;
};

// Each of the nob block rows draws `active` distinct column blocks out of nib
// uniformly at random (partial Fisher-Yates), sorted ascending: int32 [nob, active].
Tensor draw_block_pattern(int64_t row_blocks, int64_t col_blocks, int64_t active, Rng& rng);

}  // namespace shamn
