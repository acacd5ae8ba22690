#include "autograd/op_work.h"

#include <algorithm>

namespace shamn::op_work {

namespace {
constexpr int64_t kIndex = 4;  // bytes of an int32 index

// Rows of a [rows, dim] table reached by `gathers` indexed reads or writes.
int64_t touched(int64_t gathers, int64_t rows) { return std::min(gathers, rows); }

// Multiply-adds of one block-sparse product over n rows: each of the nob block
// rows multiplies its a active b x b blocks.
int64_t block_macs(int64_t n, const BlockSparseDims& d) {
  return n * d.row_blocks() * d.active * d.block * d.block;
}
int64_t pattern_bytes(const BlockSparseDims& d) { return d.row_blocks() * d.active * kIndex; }
}  // namespace

std::vector<int64_t> segment_rows(const std::vector<int64_t>& offsets) {
  std::vector<int64_t> rows;
  for (size_t g = 0; g + 1 < offsets.size(); ++g) rows.push_back(offsets[g + 1] - offsets[g]);
  return rows;
}

OpWork matmul_forward(int64_t M, int64_t N, int64_t K, int64_t s) {
  return {2 * M * N * K, (M * K + K * N + M * N) * s};
}

OpWork matmul_backward(int64_t M, int64_t N, int64_t K, int64_t s, GradsWanted g) {
  OpWork w{0, M * N * s};                              // dC
  if (g.a) w += {2 * M * N * K, (K * N + M * K) * s};  // B read, dA written
  if (g.b) w += {2 * M * N * K, (M * K + K * N) * s};  // A read, dB written
  return w;
}

OpWork block_sparse_forward(int64_t n, const BlockSparseDims& d, bool bias, int64_t s, bool residual) {
  OpWork w{2 * block_macs(n, d), (n * d.in + d.value_count() + n * d.out) * s + pattern_bytes(d)};
  if (bias) w += {n * d.out, d.out * s};
  if (residual) w += {n * d.out, n * d.out * s};  // the residual read and added
  return w;
}

OpWork block_sparse_backward(int64_t n, const BlockSparseDims& d, int64_t s, GradsWanted g,
                             bool add_residual) {
  OpWork w{0, n * d.out * s};  // dy
  if (g.a || g.b) w.bytes += pattern_bytes(d);
  if (g.a) w += {2 * block_macs(n, d), (d.value_count() + n * d.in) * s};  // W read, dx written
  if (g.b) w += {2 * block_macs(n, d), (n * d.in + d.value_count()) * s};  // x read, dW written
  if (g.c) w += {n * d.out, d.out * s};
  if (add_residual) w += {n * d.out, 2 * n * d.out * s};  // dresidual += dy
  return w;
}

OpWork block_sparse_segments_forward(const std::vector<int64_t>& rows, const std::vector<BlockSparseDims>& d,
                                     const std::vector<bool>& bias, int64_t s) {
  OpWork w;
  for (size_t g = 0; g < rows.size(); ++g) {
    w.bytes += (rows[g] * d[g].in + rows[g] * d[g].out) * s;  // this expert's part of x and y
    if (rows[g] == 0) continue;
    w += {2 * block_macs(rows[g], d[g]), d[g].value_count() * s + pattern_bytes(d[g])};
    if (bias[g]) w += {rows[g] * d[g].out, d[g].out * s};
  }
  return w;
}

OpWork block_sparse_segments_backward(const std::vector<int64_t>& rows, const std::vector<BlockSparseDims>& d,
                                      int64_t s, bool dx, const std::vector<GradsWanted>& g) {
  OpWork w;
  for (size_t e = 0; e < rows.size(); ++e) {
    if (rows[e] == 0) continue;
    GradsWanted want = g[e];
    want.a = dx;
    w += block_sparse_backward(rows[e], d[e], s, want);
  }
  return w;
}

OpWork causal_conv_forward(int64_t btd, int64_t dim, int64_t kernel, int64_t s) {
  return {2 * btd * kernel, (2 * btd + dim * kernel) * s};
}

OpWork causal_conv_backward(int64_t btd, int64_t dim, int64_t kernel, int64_t s, GradsWanted g) {
  OpWork w{0, btd * s};                                        // dc
  if (g.a) w += {2 * btd * kernel, (dim * kernel + btd) * s};  // conv read, du written
  if (g.b) w += {2 * btd * kernel, (btd + dim * kernel) * s};  // u read, dconv written
  return w;
}

OpWork unary_forward(int64_t n, int64_t flops, int64_t s) { return {n * flops, 2 * n * s}; }
OpWork unary_backward(int64_t n, int64_t backward_flops, int64_t s) {
  return {n * backward_flops, 3 * n * s};
}

OpWork binary_forward(int64_t rows, int64_t cols, int64_t s) {
  return {rows * cols, (2 * rows * cols + cols) * s};
}

OpWork binary_backward(Binary kind, int64_t rows, int64_t cols, int64_t s, GradsWanted g) {
  const int64_t n = rows * cols;
  const bool mul = kind == Binary::mul;
  OpWork w{0, n * s};                                           // dy
  if (g.a) w += {mul ? n : 0, (n + (mul ? cols : 0)) * s};      // da = dy (* b)
  if (g.b) w += {mul ? 2 * n : n, (cols + (mul ? n : 0)) * s};  // db = row sums of dy (* a)
  return w;
}

OpWork scale(int64_t n, int64_t s) { return {n, 2 * n * s}; }
OpWork copy(int64_t n, int64_t s) { return {0, 2 * n * s}; }
OpWork reduce_forward(int64_t n, int64_t s) { return {n, n * s}; }
OpWork reduce_backward(int64_t n, int64_t s) { return {0, n * s}; }

OpWork gather_rows_forward(int64_t n, int64_t num_rows, int64_t dim, int64_t s) {
  return {0, (touched(n, num_rows) * dim + n * dim) * s + n * kIndex};
}

OpWork gather_rows_backward(int64_t n, int64_t num_rows, int64_t dim, int64_t s) {
  return {n * dim, (n * dim + touched(n, num_rows) * dim) * s + n * kIndex};
}

// Forward: max, exp of the difference, sum, divide: 4 per element. Backward: the
// row's dot of dy and y, then (dy - dot) * y: 4 per element.
OpWork softmax_forward(int64_t n, int64_t s) { return {4 * n, 2 * n * s}; }
OpWork softmax_backward(int64_t n, int64_t s) { return {4 * n, 3 * n * s}; }

// Forward: max, exp of the difference, sum per logit; the row's max and log-sum
// saved. Backward: exp((x - max) - log_sum), times the row's weight, added.
OpWork cross_entropy_forward(int64_t rows, int64_t vocab, int64_t s) {
  return {4 * rows * vocab, (rows * vocab + 2 * rows) * s + rows * kIndex};
}

OpWork cross_entropy_backward(int64_t rows, int64_t vocab, int64_t s) {
  return {5 * rows * vocab, (2 * rows * vocab + 2 * rows) * s + rows * kIndex};
}

// Forward: sum of squares (2), then x * rstd * gain (2) per element. Backward: dx
// needs the row's dot of dy*gain and x (3) and rstd * (dy*gain - x * c) (3); dgain
// sums dy * x * rstd (3).
OpWork rms_norm_forward(int64_t rows, int64_t dim, int64_t s) {
  return {4 * rows * dim, (2 * rows * dim + dim + rows) * s};
}

OpWork rms_norm_backward(int64_t rows, int64_t dim, int64_t s, GradsWanted g) {
  const int64_t n = rows * dim;
  OpWork w{0, (2 * n + dim + rows) * s};  // dy, x, gain, rstd
  if (g.a) w += {6 * n, n * s};
  if (g.b) w += {3 * n, dim * s};
  return w;
}

// Forward per token: a softmax over the G group logits and one over each group's
// experts (4 per element), then P = pg * pe (1 per expert). Backward: dpe = dP * pg
// (1), dpg sums dP * pe (2), then both softmax backwards (4 per element).
OpWork router_probs_forward(int64_t n, const MoeShape& m, int64_t s) {
  const int64_t G = m.groups, X = m.experts();
  return {n * (4 * G + 5 * X), (2 * n * G + 3 * n * X) * s};
}

OpWork router_probs_backward(int64_t n, const MoeShape& m, int64_t s, GradsWanted g) {
  const int64_t G = m.groups, X = m.experts();
  OpWork w{n * 3 * X, (2 * n * X + n * G) * s};  // dP, pe, pg
  if (g.a) w += {n * 4 * G, n * G * s};
  if (g.b) w += {n * 4 * X, n * X * s};
  return w;
}

// gates[t, i] = P[t, e_i] / sum_i P[t, e_i]: k gathers, a sum and k divisions.
OpWork moe_gates_forward(int64_t n, int64_t k, int64_t s) {
  return {2 * n * k, 2 * n * k * s + n * k * kIndex};
}

// dP[t, e_i] = (dg_i - sum_j dg_j gates_j) / sum: 4 per slot; dP is written whole.
OpWork moe_gates_backward(int64_t n, int64_t experts, int64_t k, int64_t s) {
  return {4 * n * k, (3 * n * k + n * experts) * s + n * k * kIndex};
}

OpWork plan_dispatch(int64_t n, int64_t k, int64_t experts) {
  return {0, 3 * n * k * kIndex + (experts + 1) * 8};
}

OpWork moe_combine_forward(int64_t n, int64_t k, int64_t dim, int64_t s, bool residual) {
  OpWork w{2 * n * k * dim, (n * k * dim + n * k + n * dim) * s + n * k * kIndex};
  if (residual) w += {n * dim, n * dim * s};  // the residual read and added
  return w;
}

OpWork moe_combine_backward(int64_t n, int64_t k, int64_t dim, int64_t s, GradsWanted g, bool add_residual) {
  OpWork w{0, n * dim * s + n * k * kIndex};                   // dout, the rows
  if (g.a) w += {2 * n * k * dim, (n * k * dim + n * k) * s};  // dg = dout . y
  if (g.b) w += {n * k * dim, (n * k + n * k * dim) * s};      // dys = g * dout
  if (add_residual) w += {n * dim, 2 * n * dim * s};           // dresidual += dout
  return w;
}

// Forward per segment: t = x A^T (2 n r in), y += scale t B^T (2 n out r); x, A,
// B read, t written (kept for backward), y read and written.
OpWork low_rank_forward(const std::vector<int64_t>& rows, const std::vector<int64_t>& ranks, int64_t in,
                        int64_t out, int64_t s) {
  OpWork w;
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t n = rows[g], r = ranks[g];
    if (n == 0 || r == 0) continue;
    w += {2 * n * r * in + 2 * n * out * r, (n * in + r * in + out * r + n * r + 2 * n * out) * s};
  }
  return w;
}

// Backward per segment: dB = scale dy^T t (2 n out r); dt = scale dy B (2 n out
// r), dA = dt^T x and dx = dt A (2 n r in each); dy, t, B, x, A read, the
// gradients written.
OpWork low_rank_backward(const std::vector<int64_t>& rows, const std::vector<int64_t>& ranks, int64_t in,
                         int64_t out, int64_t s, GradsWanted g) {
  OpWork w;
  int64_t total_rows = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t n = rows[e], r = ranks[e];
    total_rows += n;
    if (n == 0 || r == 0 || !(g.a || g.b)) continue;
    w += {2 * n * out * r, (n * out + out * r) * s};  // dt from dy and B
    if (g.b) w += {2 * n * out * r + 2 * n * r * in, (n * r + out * r + n * in + r * in) * s};
    if (g.a) w += {2 * n * r * in, (r * in + n * in) * s};
  }
  if (g.c) w += copy(total_rows * out, s);
  return w;
}

// Forward per query: both halves' scores against n keys (2 * n * dh each), a
// comparison per score for each top-k, the k*k candidate sums and their top-k,
// the softmax of k scores (4 each) and the weighted read of k value rows.
OpWork product_key_forward(int64_t N, const ProductKeyDims& d, int64_t s, bool residual) {
  const int64_t flops = N * (4 * d.n * d.dh + 2 * d.n + 2 * d.k * d.k + 4 * d.k + 2 * d.k * d.dim);
  const int64_t bytes =
      (N * 2 * d.dh + 2 * d.n * d.dh + touched(N * d.k, d.slots()) * d.dim + N * d.dim + N * d.k) * s +
      N * d.k * kIndex;
  OpWork w{flops, bytes};
  if (residual) w += {N * d.dim, N * d.dim * s};
  return w;
}

// Backward per query: dweights from dout . values[slot] (2 * D each), the softmax
// backward (4 each); dq and the key gradients through the k selected pairs
// (2 * dh per half and pair, each way); dvalues[slot] += weight * dout (2 * D each).
OpWork product_key_backward(int64_t N, const ProductKeyDims& d, int64_t s, bool dq, bool dkeys, bool dvalues,
                            bool add_residual) {
  const int64_t rows = touched(N * d.k, d.slots()) * d.dim;
  OpWork w{N * d.k * (2 * d.dim + 4), (N * d.dim + rows + N * d.k) * s + N * d.k * kIndex};
  if (dq) w += {N * d.k * 4 * d.dh, (2 * d.n * d.dh + N * 2 * d.dh) * s};     // keys read, dq written
  if (dkeys) w += {N * d.k * 4 * d.dh, (N * 2 * d.dh + 2 * d.n * d.dh) * s};  // q read, dkeys written
  if (dvalues) w += {N * d.k * 2 * d.dim, rows * s};
  if (add_residual) w += {N * d.dim, 2 * N * d.dim * s};  // dresidual += dout
  return w;
}

OpWork hash_embedding_forward(int64_t n, const HashDims& d, int64_t s) {
  const int64_t rows = touched(n * d.hashes, d.buckets) * d.dim;
  return {2 * n * d.hashes * d.dim, (rows + n * d.hashes + n * d.dim) * s + n * (1 + d.hashes) * kIndex};
}

OpWork hash_embedding_backward(int64_t n, const HashDims& d, int64_t s, GradsWanted g) {
  const int64_t rows = touched(n * d.hashes, d.buckets) * d.dim;
  OpWork w{0, n * d.dim * s + n * (1 + d.hashes) * kIndex};             // dy, tokens, buckets
  if (g.a) w += {2 * n * d.hashes * d.dim, (n * d.hashes + rows) * s};  // importance read, dtable rows
  if (g.b) w += {2 * n * d.hashes * d.dim, (rows + n * d.hashes) * s};  // table rows read, dimportance
  return w;
}

// Forward: scores z table^T (2 * buckets * D per row), each logit gathers h scores
// (2 * h); fused, the softmax over V (4 per logit: max, exp, sum) in place of
// writing [n, V] logits.
OpWork hash_head_forward(int64_t n, const HashDims& d, int64_t s, bool fused) {
  const int64_t V = d.vocab, h = d.hashes;
  OpWork w{2 * n * d.buckets * d.dim + 2 * n * V * h,
           (n * d.dim + d.buckets * d.dim + V * h + n * d.buckets) * s + V * h * kIndex};
  if (fused)
    w += {4 * n * V, n * s + n * kIndex};  // lse, targets
  else
    w.bytes += n * V * s;
  return w;
}

// Backward: fused, each logit again (2 * h), its softmax weight and gradient (4);
// then dscores[b] += importance * dlogit (2 * h per logit), dimportance +=
// dlogit * score (2 * h), dz = dscores table (2 * buckets * D per row), dtable =
// dscores^T z (the same).
OpWork hash_head_backward(int64_t n, const HashDims& d, int64_t s, bool fused, GradsWanted g) {
  const int64_t V = d.vocab, h = d.hashes;
  OpWork w{2 * n * V * h, (n * d.buckets + V * h) * s + V * h * kIndex};  // dscores from scores, importance
  if (fused)
    w += {2 * n * V * h + 4 * n * V, n * s + n * kIndex};  // logits again, lse, targets
  else
    w.bytes += n * V * s;                                                          // dlogits
  if (g.a) w += {2 * n * d.buckets * d.dim, (d.buckets * d.dim + n * d.dim) * s};  // table read, dz written
  if (g.b) w += {2 * n * d.buckets * d.dim, (n * d.dim + d.buckets * d.dim) * s};  // z read, dtable written
  if (g.c) w += {2 * n * V * h, V * h * s};
  return w;
}

}  // namespace shamn::op_work
