#pragma once
#include "autograd/variable.h"
#include "core/kernels/block_sparse.h"

namespace shamn {

// y = x W^T + bias with W block-sparse (SPEC 1.3).
// x: [..., in]  values: [nob, a, b, b]  col_index: [nob, a] int32  bias: [out] or undefined
// -> [..., out]. Gradients flow into x, values (active blocks only) and bias.
Var block_sparse_linear(const Var& x, const Var& values, const Tensor& col_index,
                        const Var& bias, int64_t block);

}  // namespace shamn
