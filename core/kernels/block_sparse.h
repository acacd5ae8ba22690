#pragma once
// Block-sparse linear kernels over the BSR layout of SPEC 1.3:
//   W[r*b + i, col_index[r, m]*b + k] = values[r, m, i, k],  y = x W^T + bias
// Every block row has the same number `active` of non-zero blocks.
//
// Operands (N rows of activations):
//   x: [N, in]  values: [nob, a, b, b]  col_index: [nob, a] int32 (sorted)  bias: [out]
//   y, dy: [N, out]   dx: [N, in]   dvalues: [nob, a, b, b]   dbias: [out]
// Backward kernels accumulate (+=); grad input and grad values write dx or
// dvalues instead with overwrite (a fresh buffer: no zero fill, no read). Fast float kernels and the slow,
// obvious
// `_naive` twins (the test oracle, and the f64 path for gradient checks). The float
// kernels are packed, SIMD and parallel for blocks that are multiples of 16 (16, 32,
// 64, ...); other block sizes run the naive loops. Results are bit-identical for any
// thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/rows.h"
#include "core/product_precision.h"

namespace shamn {

struct BlockSparseDims {
  int64_t in = 0;      // input features, multiple of block
  int64_t out = 0;     // output features, multiple of block
  int64_t block = 32;  // b
  int64_t active = 0;  // a: active blocks per block row

  int64_t col_blocks() const { return in / block; }   // nib
  int64_t row_blocks() const { return out / block; }  // nob
  int64_t value_count() const { return row_blocks() * active * block * block; }
};

// Where the products read their x operand (forward and grad values): row t of x
// is x[rows[t]] (rows given) or x[t], and the kernels read act of it. The fast
// kernels gather and activate the rows as they pack them, so no gathered or
// activated copy of x is ever made; the sums are those of the same product on
// such a copy, bit for bit (a test).
struct RowSource {
  const int32_t* rows = nullptr;  // [n] row indices into x, or null
  InputActivation act = InputActivation::none;
  bool plain() const { return rows == nullptr && act == InputActivation::none; }
};

// Throws naming the mismatch if col_index is not [nob, a] with sorted, distinct
// entries in [0, nib).
void check_block_pattern(const int32_t* col_index, const BlockSparseDims& dims);

// With p = bf16 the products read x, dy and values rounded to bf16, bias and
// sums f32 (train.precision, core/product_precision.h): the fast kernels pack
// the rounded operands in pairs of k and add each pair as vdpbf16ps does (on
// it where the CPU has AVX512_BF16; block_sparse_simd.h), the naive loops sum
// rounded copies in k order.
// With a residual [n, out] (not y's memory) the product writes
// y = residual + (x W^T + bias): bitwise the product followed by adding it, but
// added to each finished tile while it is still in L1, so the product's own
// output is never written and read back (the mixer's residual connection).
void block_sparse_forward(float* y, const float* x, const float* values, const int32_t* col_index,
                          const float* bias, int64_t n, const BlockSparseDims& dims,
                          ProductPrecision p = ProductPrecision::f32, const RowSource& src = {},
                          const float* residual = nullptr);
void block_sparse_backward_input(float* dx, const float* dy, const float* values, const int32_t* col_index,
                                 int64_t n, const BlockSparseDims& dims,
                                 ProductPrecision p = ProductPrecision::f32, bool overwrite = false);
void block_sparse_backward_values(float* dvalues, const float* dy, const float* x, const int32_t* col_index,
                                  int64_t n, const BlockSparseDims& dims,
                                  ProductPrecision p = ProductPrecision::f32, const RowSource& src = {},
                                  bool overwrite = false);
// dbias[out] += sum over rows of dy (fixed order: thread-count independent).
void block_sparse_backward_bias(float* dbias, const float* dy, int64_t n, const BlockSparseDims& dims);

// Grad values reads a band of dy (one block row's) or of x (one block column's)
// from a packed contiguous copy when at least this many blocks read it, on
// average, and in place otherwise: with few readers the copy costs more than it
// saves. Either way each sum is the same chain, so the bits do not change (a
// test); tests and benchmarks set it to compare the two. 0 restores the default.
inline constexpr int64_t kGradValuesPackReaders = 4;
void set_grad_values_pack_readers(int64_t readers);

// The f32 forward and grad-input tiles of up to 16 rows read their A operand where
// it lies (x's rows, gathered or not, when no activation applies; dy's rows) rather than from
// a packed, transposed copy of each token tile: the same FMAs in the same order,
// so the same bits (a test). On by default; tests and benchmarks turn it off to
// compare the two.
void set_block_sparse_rows_in_place(bool in_place);

// The n rows a RowSource names, as a contiguous copy [n, in]: the naive
// kernels' (and the f64 path's) x, and the tests' oracle for the fast kernels.
template <class T>
std::vector<T> source_rows(const T* x, int64_t n, int64_t in, const RowSource& src) {
  std::vector<T> out(static_cast<size_t>(n * in));
  if (src.rows)
    gather_rows_forward(out.data(), x, src.rows, n, in);
  else
    std::copy(x, x + n * in, out.begin());
  if (src.act == InputActivation::gelu) gelu_forward(out.data(), out.data(), n * in);
  if (src.act == InputActivation::silu) silu_forward(out.data(), out.data(), n * in);
  return out;
}

template <class T>
void block_sparse_forward_naive(T* y, const T* x, const T* values, const int32_t* col_index, const T* bias,
                                int64_t n, const BlockSparseDims& d) {
  const int64_t b = d.block, a = d.active;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < d.row_blocks(); ++r)
      for (int64_t i = 0; i < b; ++i) {
        double acc = bias ? static_cast<double>(bias[r * b + i]) : 0.0;
        for (int64_t m = 0; m < a; ++m) {
          const int64_t c = col_index[r * a + m];
          const T* w = values + ((r * a + m) * b + i) * b;
          for (int64_t k = 0; k < b; ++k) acc += static_cast<double>(w[k]) * x[t * d.in + c * b + k];
        }
        y[t * d.out + r * b + i] = static_cast<T>(acc);
      }
}

template <class T>
void block_sparse_backward_input_naive(T* dx, const T* dy, const T* values, const int32_t* col_index,
                                       int64_t n, const BlockSparseDims& d, bool overwrite = false) {
  const int64_t b = d.block, a = d.active;
  if (overwrite) std::fill_n(dx, n * d.in, T(0));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < d.row_blocks(); ++r)
      for (int64_t m = 0; m < a; ++m) {
        const int64_t c = col_index[r * a + m];
        for (int64_t i = 0; i < b; ++i) {
          const T g = dy[t * d.out + r * b + i];
          const T* w = values + ((r * a + m) * b + i) * b;
          for (int64_t k = 0; k < b; ++k) dx[t * d.in + c * b + k] += g * w[k];
        }
      }
}

template <class T>
void block_sparse_backward_values_naive(T* dvalues, const T* dy, const T* x, const int32_t* col_index,
                                        int64_t n, const BlockSparseDims& d, bool overwrite = false) {
  const int64_t b = d.block, a = d.active;
  if (overwrite) std::fill_n(dvalues, d.value_count(), T(0));
  for (int64_t r = 0; r < d.row_blocks(); ++r)
    for (int64_t m = 0; m < a; ++m) {
      const int64_t c = col_index[r * a + m];
      for (int64_t i = 0; i < b; ++i)
        for (int64_t k = 0; k < b; ++k) {
          double acc = 0;
          for (int64_t t = 0; t < n; ++t)
            acc += static_cast<double>(dy[t * d.out + r * b + i]) * x[t * d.in + c * b + k];
          dvalues[((r * a + m) * b + i) * b + k] += static_cast<T>(acc);
        }
    }
}

template <class T>
void block_sparse_backward_bias_naive(T* dbias, const T* dy, int64_t n, const BlockSparseDims& d) {
  for (int64_t o = 0; o < d.out; ++o) {
    double acc = 0;
    for (int64_t t = 0; t < n; ++t) acc += dy[t * d.out + o];
    dbias[o] += static_cast<T>(acc);
  }
}

// f64 (gradient checks) runs the naive twins under the fast kernels' names, so an
// op templated on the scalar calls one name for both dtypes; f64 operands are
// never rounded (the precision is ignored).
inline void block_sparse_forward(double* y, const double* x, const double* values, const int32_t* col_index,
                                 const double* bias, int64_t n, const BlockSparseDims& dims,
                                 ProductPrecision = ProductPrecision::f32, const RowSource& src = {},
                                 const double* residual = nullptr) {
  if (!src.plain()) {
    const std::vector<double> xs = source_rows(x, n, dims.in, src);
    block_sparse_forward_naive(y, xs.data(), values, col_index, bias, n, dims);
  } else {
    block_sparse_forward_naive(y, x, values, col_index, bias, n, dims);
  }
  if (residual) axpy(y, residual, 1.0, n * dims.out);
}
inline void block_sparse_backward_input(double* dx, const double* dy, const double* values,
                                        const int32_t* col_index, int64_t n, const BlockSparseDims& dims,
                                        ProductPrecision = ProductPrecision::f32, bool overwrite = false) {
  block_sparse_backward_input_naive(dx, dy, values, col_index, n, dims, overwrite);
}
inline void block_sparse_backward_values(double* dvalues, const double* dy, const double* x,
                                         const int32_t* col_index, int64_t n, const BlockSparseDims& dims,
                                         ProductPrecision = ProductPrecision::f32, const RowSource& src = {},
                                         bool overwrite = false) {
  if (!src.plain()) {
    const std::vector<double> xs = source_rows(x, n, dims.in, src);
    return block_sparse_backward_values_naive(dvalues, dy, xs.data(), col_index, n, dims, overwrite);
  }
  block_sparse_backward_values_naive(dvalues, dy, x, col_index, n, dims, overwrite);
}
inline void block_sparse_backward_bias(double* dbias, const double* dy, int64_t n,
                                       const BlockSparseDims& dims) {
  block_sparse_backward_bias_naive(dbias, dy, n, dims);
}

}  // namespace shamn
