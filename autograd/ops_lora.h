#pragma once
#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace shamn {

// One low-rank adapter: delta(x) = scale * (x A^T) B^T (LoRA, Hu et al. 2021).
// a: [rank, in]  b: [out, rank]. Both undefined: no adapter.
struct LowRankOperands {
  Var a;
  Var b;
};

// y plus the adapters' outputs over consecutive row segments of x, as
// block_sparse_linear_segments runs its layers: rows [offsets[g], offsets[g+1])
// of x go through adapters[g] (the MoE experts, each on its routed tokens; one
// segment for a single layer).
// y: [M, out]  x: [M, in]  offsets: G+1 ascending, 0 .. M  -> [M, out].
// The sum is made in y's storage, which the result shares: y must be a layer's
// own output that nothing else reads (not a leaf that requires a gradient).
// Adding in place keeps an adapted layer's activations those of the base plus
// M * rank floats (the intermediate x A^T, kept for the backward pass), where a
// separate sum would keep two more [M, out] tensors alive until backward.
// Gradients flow into y (unchanged), x, every a and b; an adapter with no rows
// gets none, as if it had not run.
Var add_low_rank_segments(const Var& y, const Var& x, const std::vector<int64_t>& offsets,
                          const std::vector<LowRankOperands>& adapters, double scale);

}  // namespace shamn
