#pragma once
#include "autograd/variable.h"
#include "core/kernels/product_key.h"

namespace shamn {

// Product-key memory lookup (SPEC 1.5): q = [q1, q2] scores the two key halves, the
// top k of the k*k product candidates are read from `values` with softmax weights.
// q: [..., 2*dh]  keys1, keys2: [n, dh]  values: [n*n, D]  1 <= topk <= n  -> [..., D].
// Gradients flow into q, keys1, keys2 (selected rows only) and values (selected rows
// only); the selection itself is piecewise constant and passes no gradient.
// With a residual [..., D] the op is add(residual, lookup) in one pass, the same bits.
Var product_key_memory(const Var& q, const Var& keys1, const Var& keys2, const Var& values, int64_t topk,
                       const Var& residual = Var());

}  // namespace shamn
