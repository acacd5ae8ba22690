#pragma once
#include <vector>

#include "autograd/variable.h"
#include "core/kernels/block_sparse.h"

namespace shamn {

// What a block-sparse op reads from its input x: x itself, or gelu(x) or
// silu(x) (SPEC 1.6, 1.2), which the op computes as it needs them and again in
// the backward, and never keeps: a step holds one activation of x's size less
// than with a separate activation op (experiments/training_memory.md). The
// results are bitwise those of the activation op followed by the product.

// y = act(x) W^T + bias with W block-sparse (SPEC 1.3).
// x: [..., in]  values: [nob, a, b, b]  col_index: [nob, a] int32  bias: [out] or undefined
// -> [..., out]. Gradients flow into x, values (active blocks only) and bias.
// With a residual [..., out] the op is add(residual, y) in one pass, the same
// bits: the product's tiles take the residual as they are stored.
Var block_sparse_linear(const Var& x, const Var& values, const Tensor& col_index, const Var& bias,
                        int64_t block, InputActivation act = InputActivation::none,
                        const Var& residual = Var());

// One block-sparse layer's operands (values, col_index, bias as above).
struct BlockSparseOperands {
  Var values;
  Tensor col_index;
  Var bias;  // may be undefined
};

// Several layers, each over its own consecutive rows of one input (the MoE experts,
// each on the tokens routed to it): rows [offsets[g], offsets[g+1]) of x go through
// layers[g]. The layers run concurrently, which small row counts need to fill the
// threads; results are bitwise those of one block_sparse_linear per segment.
// x: [M, in]  offsets: G+1 ascending, 0 .. M  -> [M, out]. A layer with no rows gets
// no gradient, as if it had not run.
// act as above, per segment (the MoE's down projections read gelu of the up
// projections' output).
// With rows (int32 [M], defined), x is a table [R, in] and the op's input row i
// is x row rows[i] (the MoE's tokens in dispatch order): each segment gathers
// its rows into scratch as it runs, forward and backward, so the gathered
// [M, in] copy is never kept for the backward; x's gradient is scatter-added
// as gather_rows' backward does. Bitwise gather_rows followed by the op.
Var block_sparse_linear_segments(const Var& x, const std::vector<int64_t>& offsets,
                                 const std::vector<BlockSparseOperands>& layers, int64_t block,
                                 InputActivation act = InputActivation::none, const Tensor& rows = Tensor());

}  // namespace shamn
