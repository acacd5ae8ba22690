#pragma once
// Differentiable ops. Each runs its forward kernel on f32 (training) or f64
// (gradient checks) values and records a Node when a gradient is needed.
// Shapes use SPEC letters where it helps: N rows (= B*T), D features, V vocab.
#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace shamn {

// op(a) @ op(b). Without trans_a, a is [..., K] (leading dims flattened into M rows)
// and the result is [..., N]; with trans_a, a is [K, M] and the result [M, N].
// b is [K, N], or [N, K] with trans_b (a Linear weight [out, in]: y = x W^T).
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);

// a op b, where b has a's shape or a's trailing dims (broadcast over leading rows).
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var scale(const Var& a, double factor);

Var sum(const Var& a);   // all elements -> scalar (shape [])
Var mean(const Var& a);  // all elements -> scalar

Var reshape(const Var& a, const Shape& shape);             // a view: no copy
Var slice_last(const Var& a, int64_t begin, int64_t end);  // [..., begin:end]
Var concat_last(const std::vector<Var>& parts);            // along the last dim

// table: [R, D]; indices: int32 of any shape S -> [S..., D]
Var gather_rows(const Var& table, const Tensor& indices);
// src: [S..., D]; indices: int32 of shape S -> [num_rows, D], rows summed per index
Var scatter_add_rows(const Var& src, const Tensor& indices, int64_t num_rows);

Var softmax(const Var& a);      // over the last dim
Var log_softmax(const Var& a);  // over the last dim
// Mean over positions of logsumexp(logits) - logits[target]; logits [..., V],
// targets int32 with logits' leading shape. Never materialises the probabilities
// in forward; backward recomputes them row by row.
Var cross_entropy(const Var& logits, const Tensor& targets);

// x / sqrt(mean(x^2) + eps) * gain over the last dim; gain: [D]
Var rms_norm(const Var& x, const Var& gain, double eps = 1e-5);

Var gelu(const Var& a);  // tanh form (SPEC 1.6)
Var silu(const Var& a);
Var sigmoid(const Var& a);

}  // namespace shamn
