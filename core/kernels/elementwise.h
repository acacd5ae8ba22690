#pragma once
// Element-wise kernels, templated on the scalar (float for training, double for
// gradient checks). Backward kernels ACCUMULATE into the input gradient (+=), so a
// value used twice gets both contributions. Each output element is written by one
// task: results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/chunk_fold.h"
#include "core/parallel.h"

namespace shamn {

inline constexpr int64_t kElementGrain = 1 << 14;

// Rows per task for row-wise kernels: about 4K elements each.
inline int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)); }

// a: [R, C]  b: [C] broadcast over rows (C == R*C when shapes match)  out: [R, C]
template <class T, class Op>
void broadcast_rows_forward(T* out, const T* a, const T* b, int64_t rows, int64_t cols, Op op) {
  if (rows == 1) {  // same shapes: one long row, split across its columns
    parallel_for(0, cols, kElementGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) out[c] = op(a[c], b[c]);
    });
    return;
  }
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = op(a[r * cols + c], b[c]);
  });
}

// out[i] = f(in[i])
template <class T, class F>
void map_forward(T* out, const T* in, int64_t n, F f) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = f(in[i]);
  });
}

// din[i] += dout[i] * f'(in[i], out[i]), or din[i] = ... with overwrite (a
// fresh gradient: no zero fill, no read; din may be dout).
template <class T, class DF>
void map_backward(T* din, const T* dout, const T* in, const T* out, int64_t n, DF dfdx,
                  bool overwrite = false) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
    if (overwrite) {
      for (int64_t i = lo; i < hi; ++i) din[i] = dout[i] * dfdx(in[i], out[i]);
    } else {
      for (int64_t i = lo; i < hi; ++i) din[i] += dout[i] * dfdx(in[i], out[i]);
    }
  });
}

// y += alpha * x
template <class T>
void axpy(T* y, const T* x, T alpha, int64_t n) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) y[i] += alpha * x[i];
  });
}

// p[0, n) = 0, in parallel: a scratch array of a kernel that accumulates into
// it (a serial memset of a 100 MB buffer held back every thread but one).
template <class T>
void zero_fill(T* p, int64_t n) {
  parallel_for(0, n, kElementGrain, [&](int64_t lo, int64_t hi) { std::fill(p + lo, p + hi, T(0)); });
}

// Rows per partial of sum_rows_accumulate_by.
inline constexpr int64_t kSumRowChunk = 64;
struct NoRowVisit {
  void operator()(int64_t) const {}
};

// dst[C] += sum over rows r of term(r, c) for each column c. Rows are summed in
// fixed chunks whose partials are added in chunk order (core/chunk_fold.h), so
// the result is the same for any thread count. Each chunk zeroes its own partial
// row, in its own task: no serial fill of the partials. visit(r), when given, runs just before
// row r's terms are read (another pass over the row, fused while it is in cache).
template <class T, class Term, class Visit = NoRowVisit>
void sum_rows_accumulate_by(T* dst, int64_t rows, int64_t cols, Term term, Visit visit = {}) {
  constexpr int64_t kRowChunk = kSumRowChunk;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  if (chunks <= 1) {  // few rows (one when shapes match): split the columns instead
    for (int64_t r = 0; r < rows; ++r) visit(r);
    parallel_for(0, cols, std::max<int64_t>(1, 4096 / std::max<int64_t>(rows, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = 0; r < rows; ++r)
                     for (int64_t c = lo; c < hi; ++c) dst[c] += term(r, c);
                 });
    return;
  }
  // dst as `cols` rows of one value, so that the partials are added over ranges of columns.
  fold_chunks_in_order<T>(
      chunks, cols, 1,
      [&](int64_t k, T* p) {
        std::fill(p, p + cols, T(0));
        const int64_t end = std::min(rows, (k + 1) * kRowChunk);
        for (int64_t r = k * kRowChunk; r < end; ++r) {
          visit(r);
          for (int64_t c = 0; c < cols; ++c) p[c] += term(r, c);
        }
      },
      [&](int64_t, const T* p, int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) dst[c] += p[c];
      });
}

// dst[C] += sum over rows of src[R, C] (times the optional element-wise weight w[R, C]).
template <class T>
void sum_rows_accumulate(T* dst, const T* src, const T* w, int64_t rows, int64_t cols) {
  if (w)
    sum_rows_accumulate_by(dst, rows, cols,
                           [&](int64_t r, int64_t c) { return src[r * cols + c] * w[r * cols + c]; });
  else
    sum_rows_accumulate_by(dst, rows, cols, [&](int64_t r, int64_t c) { return src[r * cols + c]; });
}

// Activations (SPEC 1.4, 1.6). gelu is the tanh form.
template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <class T>
struct Gelu {
  static constexpr T kAlpha = T(0.7978845608028654);  // sqrt(2/pi)
  static constexpr T kBeta = T(0.044715);
  static T forward(T x) { return T(0.5) * x * (T(1) + std::tanh(kAlpha * (x + kBeta * x * x * x))); }
  static T derivative(T x) {
    const T t = std::tanh(kAlpha * (x + kBeta * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * kAlpha * (T(1) + T(3) * kBeta * x * x);
  }
};

template <class T>
struct Silu {
  static T forward(T x) { return x * sigmoid(x); }
  static T derivative(T x) {
    const T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
};

}  // namespace shamn
