#pragma once
// RMSNorm (SPEC 1.1): y = x / sqrt(mean(x^2) + eps) * gain, over the last dim.
#include <cmath>
#include <cstdint>

#include "core/kernels/elementwise.h"
#include "core/parallel.h"

namespace shamn {

// x, y: [N, D]  gain: [D]  rstd: [N] (1/sqrt(mean(x^2)+eps), saved for backward; may be null)
template <class T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* gain, int64_t rows, int64_t dim, T eps) {
  parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * dim;
      T ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
      const T s = T(1) / std::sqrt(ss / T(dim) + eps);
      if (rstd) rstd[r] = s;
      for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = xr[i] * s * gain[i];
    }
  });
}

// dx += s*g*dy - s^3/D * x * sum(g*dy*x)   dgain += sum over rows of dy*x*s
// (dx = ... instead when overwrite_dx: a fresh buffer, nothing in it to add to).
// dx or dgain may be null when that gradient is not needed.
template <class T>
void rms_norm_backward(T* dx, T* dgain, const T* dy, const T* x, const T* gain, const T* rstd, int64_t rows,
                       int64_t dim, bool overwrite_dx = false) {
  if (dx) {
    parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = x + r * dim;
        const T* dyr = dy + r * dim;
        const T s = rstd[r];
        T dot = 0;
        for (int64_t i = 0; i < dim; ++i) dot += gain[i] * dyr[i] * xr[i];
        const T c = s * s * s * dot / T(dim);
        if (overwrite_dx)
          for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] = s * gain[i] * dyr[i] - c * xr[i];
        else
          for (int64_t i = 0; i < dim; ++i) dx[r * dim + i] += s * gain[i] * dyr[i] - c * xr[i];
      }
    });
  }
  if (dgain) {
    // A deterministic column sum of dy * x_hat, x_hat = x * s formed as it is
    // read (no [N, D] buffer: filling one serially capped this op at 2x on 16
    // threads).
    sum_rows_accumulate_by(dgain, rows, dim, [&](int64_t r, int64_t i) {
      const T xhat = x[r * dim + i] * rstd[r];
      return dy[r * dim + i] * xhat;
    });
  }
}

}  // namespace shamn
