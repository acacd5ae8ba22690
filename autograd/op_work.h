#pragma once
// What each autograd op does, for the roofline of `--profile` (core/roofline.h):
// its FLOPs and the fewest bytes it must move, forward and backward, from the
// shapes of the call. The ops pass these to profile_work(); nothing here runs
// when the profiler is off.
//
// Conventions.
//   FLOPs: a multiply-add is 2; every other arithmetic operation of the op's
//     formula is 1, exp, sqrt and division included (so element-wise ops count
//     the formula, not the instructions of a vectorised exp).
//   Bytes: every operand read once and every result written once, at its element
//     size (s; int32 indices 4). A gradient is written once (first write: the
//     zero fill and read-modify-write of accumulation are not minimal). Tables
//     read or written through indices (memory values, hash buckets, gathered
//     rows) count the rows touched: min(gathers, table rows) rows.
//   Sparse work counts what is computed: active blocks only, the rows routed to
//     each expert, the memory's top-k rows, the hashed head's bucket scores and
//     its V x h gathers.
#include <cstdint>
#include <vector>

#include "core/kernels/block_sparse.h"
#include "core/kernels/hash_embedding.h"
#include "core/kernels/moe_routing.h"
#include "core/kernels/product_key.h"
#include "core/profiler.h"

namespace shamn {

struct OpWork {
  int64_t flops = 0;
  int64_t bytes = 0;
  OpWork& operator+=(const OpWork& o) {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
};

inline void record_work(const OpWork& w) { profile_work(w.flops, w.bytes); }

// Which gradients a backward pass computes.
struct GradsWanted {
  bool a = false, b = false, c = false;
};

namespace op_work {

// Rows of each segment of a segmented op: offsets[g + 1] - offsets[g].
std::vector<int64_t> segment_rows(const std::vector<int64_t>& offsets);

// C[M,N] = A[M,K] B[K,N]; backward: dA (a) and dB (b).
OpWork matmul_forward(int64_t M, int64_t N, int64_t K, int64_t s);
OpWork matmul_backward(int64_t M, int64_t N, int64_t K, int64_t s, GradsWanted g);

// y[n,out] = x[n,in] W^T (+ bias) (+ a residual [n,out]), W block-sparse; backward:
// dx (a), dvalues (b), dbias (c), and the residual's gradient added (add_residual).
OpWork block_sparse_forward(int64_t n, const BlockSparseDims& d, bool bias, int64_t s, bool residual = false);
OpWork block_sparse_backward(int64_t n, const BlockSparseDims& d, int64_t s, GradsWanted g,
                             bool add_residual = false);
// One block-sparse layer per expert over its routed rows (rows[g] of them); x and
// y are read or written once in all; the weights of experts with no rows are not touched.
OpWork block_sparse_segments_forward(const std::vector<int64_t>& rows, const std::vector<BlockSparseDims>& d,
                                     const std::vector<bool>& bias, int64_t s);
OpWork block_sparse_segments_backward(const std::vector<int64_t>& rows, const std::vector<BlockSparseDims>& d,
                                      int64_t s, bool dx, const std::vector<GradsWanted>& g);

// c[B,T,D] = depthwise causal conv of u with conv[D,K]; backward: du (a), dconv (b).
OpWork causal_conv_forward(int64_t btd, int64_t dim, int64_t kernel, int64_t s);
OpWork causal_conv_backward(int64_t btd, int64_t dim, int64_t kernel, int64_t s, GradsWanted g);

// An element-wise function of n elements at `flops` per element (forward) and
// `backward_flops` per element (backward: dy and x or y read, dx written).
OpWork unary_forward(int64_t n, int64_t flops, int64_t s);
OpWork unary_backward(int64_t n, int64_t backward_flops, int64_t s);
// Per-element FLOPs of the activations, by their formulas (core/kernels/activation.h).
inline constexpr int64_t kGeluFlops = 10, kGeluBackwardFlops = 19;
inline constexpr int64_t kSiluFlops = 5, kSiluBackwardFlops = 9;
inline constexpr int64_t kSigmoidFlops = 4, kSigmoidBackwardFlops = 3;

// out[rows,cols] = a op b, b [cols] broadcast over rows (or b of a's shape: rows 1).
enum class Binary { add, sub, mul };
OpWork binary_forward(int64_t rows, int64_t cols, int64_t s);
OpWork binary_backward(Binary kind, int64_t rows, int64_t cols, int64_t s, GradsWanted g);

// n elements read (or written) once: scale, reshape's backward copy, sum, slices.
OpWork scale(int64_t n, int64_t s);
OpWork copy(int64_t n, int64_t s);
OpWork reduce_forward(int64_t n, int64_t s);
OpWork reduce_backward(int64_t n, int64_t s);

// out[n,dim] = table[idx] (table [num_rows, dim]); backward scatter-adds.
OpWork gather_rows_forward(int64_t n, int64_t num_rows, int64_t dim, int64_t s);
OpWork gather_rows_backward(int64_t n, int64_t num_rows, int64_t dim, int64_t s);

// Row-wise softmax or log-softmax [rows, cols]; cross-entropy of logits [rows, V].
OpWork softmax_forward(int64_t n, int64_t s);
OpWork softmax_backward(int64_t n, int64_t s);
OpWork cross_entropy_forward(int64_t rows, int64_t vocab, int64_t s);
OpWork cross_entropy_backward(int64_t rows, int64_t vocab, int64_t s);

// y = x * rstd * gain over rows of width dim; backward: dx (a), dgain (b).
OpWork rms_norm_forward(int64_t rows, int64_t dim, int64_t s);
OpWork rms_norm_backward(int64_t rows, int64_t dim, int64_t s, GradsWanted g);

// MoE routing over n tokens (core/kernels/moe_routing.h).
OpWork router_probs_forward(int64_t n, const MoeShape& m, int64_t s);
OpWork router_probs_backward(int64_t n, const MoeShape& m, int64_t s, GradsWanted g);
OpWork moe_gates_forward(int64_t n, int64_t k, int64_t s);
OpWork moe_gates_backward(int64_t n, int64_t experts, int64_t k, int64_t s);
OpWork plan_dispatch(int64_t n, int64_t k, int64_t experts);
// residual: the fused residual add (moe_combine's residual operand); add_residual:
// its gradient added, not handed over.
OpWork moe_combine_forward(int64_t n, int64_t k, int64_t dim, int64_t s, bool residual = false);
OpWork moe_combine_backward(int64_t n, int64_t k, int64_t dim, int64_t s, GradsWanted g,
                            bool add_residual = false);

// LoRA adapters over row segments (autograd/ops_lora.h): segment g has rows[g]
// rows of x [., in] and rank ranks[g]; y [., out] is summed into in place.
// Backward: dx (a), each adapter's dA and dB (b; all adapters alike), and the
// copy of dy into y's gradient (c).
OpWork low_rank_forward(const std::vector<int64_t>& rows, const std::vector<int64_t>& ranks, int64_t in,
                        int64_t out, int64_t s);
OpWork low_rank_backward(const std::vector<int64_t>& rows, const std::vector<int64_t>& ranks, int64_t in,
                         int64_t out, int64_t s, GradsWanted g);

// Product-key memory over N queries (core/kernels/product_key.h); backward: dq (a),
// dkeys1 and dkeys2 (b), dvalues (c).
// A residual [N, D] is read and added in the forward, its gradient added in the backward.
OpWork product_key_forward(int64_t N, const ProductKeyDims& d, int64_t s, bool residual = false);
OpWork product_key_backward(int64_t N, const ProductKeyDims& d, int64_t s, bool dq, bool dkeys, bool dvalues,
                            bool add_residual = false);

// Hashed embedding of n tokens; backward: dtable (a), dimportance (b).
OpWork hash_embedding_forward(int64_t n, const HashDims& d, int64_t s);
OpWork hash_embedding_backward(int64_t n, const HashDims& d, int64_t s, GradsWanted g);
// The tied hashed head over n rows: bucket scores [n, buckets], the V x h gathers;
// with the fused loss (`fused`), the softmax over V without writing logits.
// Backward: dz (a), dtable (b), dimportance (c).
OpWork hash_head_forward(int64_t n, const HashDims& d, int64_t s, bool fused);
OpWork hash_head_backward(int64_t n, const HashDims& d, int64_t s, bool fused, GradsWanted g);

}  // namespace op_work
}  // namespace shamn
