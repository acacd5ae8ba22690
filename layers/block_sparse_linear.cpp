#include "layers/block_sparse_linear.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"
#include "layers/init.h"

namespace shamn {

Tensor draw_block_pattern(int64_t row_blocks, int64_t col_blocks, int64_t active, Rng& rng) {
  Tensor pattern = Tensor::empty({row_blocks, active}, DType::i32);
  std::vector<int32_t> pool(static_cast<size_t>(col_blocks));
  for (int64_t r = 0; r < row_blocks; ++r) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t m = 0; m < active; ++m) {
      const int64_t pick = m + static_cast<int64_t>(rng.below(static_cast<uint64_t>(col_blocks - m)));
      std::swap(pool[m], pool[pick]);
    }
    std::sort(pool.begin(), pool.begin() + active);
    std::copy(pool.begin(), pool.begin() + active, pattern.data<int32_t>() + r * active);
  }
  return pattern;
}

BlockSparseLinear::BlockSparseLinear(const BlockSparseOptions& o, double init_scale)
    : LoraHost(o.in, o.out), init_scale_(init_scale) {
  o.validate();
  dims_ = {o.in, o.out, o.block, o.active_blocks()};
  values_ = register_parameter("values",
                               Tensor::zeros({dims_.row_blocks(), dims_.active, dims_.block, dims_.block}));
  col_index_ = register_buffer("col_index", Tensor::zeros({dims_.row_blocks(), dims_.active}, DType::i32));
  // A fresh layer is valid before init(): the first `active` column blocks.
  for (int64_t r = 0; r < dims_.row_blocks(); ++r)
    for (int64_t m = 0; m < dims_.active; ++m)
      col_index_.data<int32_t>()[r * dims_.active + m] = static_cast<int32_t>(m);
  if (o.bias) bias_ = register_parameter("bias", Tensor::zeros({dims_.out}));
}

void BlockSparseLinear::init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {
  Rng pattern_rng = tensor_rng(seed, prefix + "col_index");
  col_index_.copy_from(draw_block_pattern(dims_.row_blocks(), dims_.col_blocks(), dims_.active, pattern_rng));
  Tensor v = values_.value();
  const double fan_in_std = init_scale_ / std::sqrt(static_cast<double>(dims_.active * dims_.block));
  init_normal(v, seed, prefix + "values", how.pick(fan_in_std, init_scale_));
  if (bias_.defined()) bias_.value().zero();
  init_lora_if_any(seed, prefix);
}

Var BlockSparseLinear::forward(const Var& x) const {
  return add_lora_output(x, block_sparse_linear(x, values_, col_index_, bias_, dims_.block));
}

Var BlockSparseLinear::forward(const Var& x, InputActivation act) const {
  if (act == InputActivation::none) return forward(x);
  if (has_lora()) return forward(act == InputActivation::gelu ? gelu(x) : silu(x));
  return block_sparse_linear(x, values_, col_index_, bias_, dims_.block, act);
}

Var BlockSparseLinear::forward(const Var& x, InputActivation act, const Var& residual) const {
  if (has_lora()) return add(residual, forward(x, act));
  return block_sparse_linear(x, values_, col_index_, bias_, dims_.block, act, residual);
}

}  // namespace shamn
