#pragma once
// RMSNorm (SPEC 1.1): y = x / sqrt(mean(x^2) + eps) * gain, over the last dim.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kernels/elementwise.h"
#include "core/kernels/lane_sum.h"
#include "core/parallel.h"

namespace shamn {

// x, y: [N, D]  gain: [D]  rstd: [N] (1/sqrt(mean(x^2)+eps), saved for backward; may be null)
// Sums of squares of R rows at once, each in lane_sum's lanes and order (the
// same bits as lane_sum row by row): one row's 16 lanes are one chain of
// dependent adds, R rows give the core R independent chains.
template <class T, int R>
void rows_sum_squares(const T* x, int64_t dim, T* out) {
  constexpr int64_t kLanes = 16;
  T lanes[R][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= dim; i += kLanes)
    for (int r = 0; r < R; ++r)
      for (int64_t l = 0; l < kLanes; ++l) lanes[r][l] += x[r * dim + i + l] * x[r * dim + i + l];
  for (int r = 0; r < R; ++r) {
    for (int64_t j = i; j < dim; ++j) lanes[r][j % kLanes] += x[r * dim + j] * x[r * dim + j];
    T sum = lanes[r][0];
    for (int64_t l = 1; l < kLanes; ++l) sum += lanes[r][l];
    out[r] = sum;
  }
}

template <class T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* gain, int64_t rows, int64_t dim, T eps) {
  parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
    constexpr int kRows = 4;
    for (int64_t r0 = lo; r0 < hi; r0 += kRows) {
      T ss[kRows];
      const int64_t nr = std::min<int64_t>(kRows, hi - r0);
      if (nr == kRows)
        rows_sum_squares<T, kRows>(x + r0 * dim, dim, ss);
      else
        for (int64_t r = 0; r < nr; ++r) {
          const T* xr = x + (r0 + r) * dim;
          ss[r] = lane_sum<T>(dim, [&](int64_t i) { return xr[i] * xr[i]; });
        }
      for (int64_t r = r0; r < r0 + nr; ++r) {
        const T* xr = x + r * dim;
        const T s = T(1) / std::sqrt(ss[r - r0] / T(dim) + eps);
        if (rstd) rstd[r] = s;
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = xr[i] * s * gain[i];
      }
    }
  });
}

// dx += s*g*dy - s^3/D * x * sum(g*dy*x)   dgain += sum over rows of dy*x*s
// (dx = ... instead when overwrite_dx: a fresh buffer, nothing in it to add to).
// dx or dgain may be null when that gradient is not needed.
template <class T>
void rms_norm_backward(T* dx, T* dgain, const T* dy, const T* x, const T* gain, const T* rstd, int64_t rows,
                       int64_t dim, bool overwrite_dx = false) {
  const auto dx_row = [=](int64_t r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const T s = rstd[r];
    const T dot = lane_sum<T>(dim, [&](int64_t i) { return gain[i] * dyr[i] * xr[i]; });
    const T c = s * s * s * dot / T(dim);
    if (overwrite_dx)
      for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = s * gain[i] * dyr[i] - c * xr[i];
    else
      for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] += s * gain[i] * dyr[i] - c * xr[i];
  };
  // dgain: a deterministic column sum of dy * x_hat, x_hat = x * s formed as it
  // is read (no [N, D] buffer: filling one serially capped this op at 2x on 16
  // threads).
  const auto dgain_term = [=](int64_t r, int64_t i) {
    const T xhat = x[r * dim + i] * rstd[r];
    return dy[r * dim + i] * xhat;
  };
  if (dx && dgain && rows > kSumRowChunk) {
    // One pass: each row's dx, then its terms into the chunk's partial of the
    // column sum, while the row is in L1 (the same sums as sum_rows_accumulate_by).
    sum_rows_accumulate_by(dgain, rows, dim, dgain_term, dx_row);
    return;
  }
  if (dx) {
    parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) dx_row(r);
    });
  }
  if (dgain) sum_rows_accumulate_by(dgain, rows, dim, dgain_term);
}

}  // namespace shamn
