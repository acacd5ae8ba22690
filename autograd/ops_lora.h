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

// The adapters' outputs over consecutive row segments of one input, as
// block_sparse_linear_segments runs its layers: rows [offsets[g], offsets[g+1])
// of x go through adapters[g] (the MoE experts, each on its routed tokens; one
// segment for a single layer).
// x: [M, in]  offsets: G+1 ascending, 0 .. M  -> [M, out]; rows of a segment
// without an adapter are 0. Gradients flow into x, every a and b; an adapter with
// no rows gets none, as if it had not run. The rank-r intermediate x A^T is kept
// for the backward pass (M * rank floats).
Var low_rank_segments(const Var& x, const std::vector<int64_t>& offsets,
                      const std::vector<LowRankOperands>& adapters, int64_t out, double scale);

}  // namespace shamn
