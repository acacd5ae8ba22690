#pragma once
// Row-wise softmax, log-softmax and the fused, stable cross-entropy.
// Every kernel is parallel over rows; each row is reduced in order by one task.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/check.h"
#include "core/kernels/elementwise.h"
#include "core/parallel.h"

namespace shamn {

template <class T>
T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// x, y: [N, C]
template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T m = row_max(xr, cols);
      T sum = 0;
      for (int64_t i = 0; i < cols; ++i) sum += (yr[i] = std::exp(xr[i] - m));
      const T inv = T(1) / sum;
      for (int64_t i = 0; i < cols; ++i) yr[i] *= inv;
    }
  });
}

// dx += y * (dy - sum(dy * y))   y: softmax output [N, C]
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* dyr = dy + r * cols;
      const T* yr = y + r * cols;
      T dot = 0;
      for (int64_t i = 0; i < cols; ++i) dot += dyr[i] * yr[i];
      for (int64_t i = 0; i < cols; ++i) dx[r * cols + i] += yr[i] * (dyr[i] - dot);
    }
  });
}

// y = x - logsumexp(x)   x, y: [N, C]. As (x - max) - log(sum): rounding
// max + log(sum) first would cost half an ulp of the largest logit, hundreds of
// ulps of y at logits of 1e4.
template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      const T m = row_max(xr, cols);
      T sum = 0;
      for (int64_t i = 0; i < cols; ++i) sum += std::exp(xr[i] - m);
      const T log_sum = std::log(sum);
      for (int64_t i = 0; i < cols; ++i) y[r * cols + i] = (xr[i] - m) - log_sum;
    }
  });
}

// dx += dy - exp(y) * sum(dy)   y: log-softmax output [N, C]
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  parallel_for(0, rows, row_grain(cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* dyr = dy + r * cols;
      T sum = 0;
      for (int64_t i = 0; i < cols; ++i) sum += dyr[i];
      for (int64_t i = 0; i < cols; ++i) dx[r * cols + i] += dyr[i] - std::exp(y[r * cols + i]) * sum;
    }
  });
}

// Per-row loss[r] = logsumexp(logits[r]) - logits[r, targets[r]], with the row's
// max[r] and log_sum[r] (logsumexp = max + log_sum) saved for backward, kept
// apart for the accuracy log_softmax_forward's comment gives.
//   logits: [N, V]  targets: [N] int32  loss, max, log_sum: [N]
template <class T>
void cross_entropy_forward(T* loss, T* max, T* log_sum, const T* logits, const int32_t* targets, int64_t rows,
                           int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r)
    SHAMN_CHECK(targets[r] >= 0 && targets[r] < vocab, "cross_entropy: target ", targets[r], " at position ",
                r, " is outside the vocabulary [0, ", vocab, ")");
  parallel_for(0, rows, row_grain(vocab), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = logits + r * vocab;
      const T m = row_max(xr, vocab);
      T sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(xr[i] - m);
      max[r] = m;
      log_sum[r] = std::log(sum);
      loss[r] = (m - xr[targets[r]]) + log_sum[r];
    }
  });
}

// dlogits[r] += dloss[r] * (softmax(logits[r]) - onehot(targets[r]))
template <class T>
void cross_entropy_backward(T* dlogits, const T* dloss, const T* logits, const T* max, const T* log_sum,
                            const int32_t* targets, int64_t rows, int64_t vocab) {
  parallel_for(0, rows, row_grain(vocab), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T g = dloss[r];
      const T* xr = logits + r * vocab;
      T* dr = dlogits + r * vocab;
      for (int64_t i = 0; i < vocab; ++i) dr[i] += g * std::exp((xr[i] - max[r]) - log_sum[r]);
      dr[targets[r]] -= g;
    }
  });
}

}  // namespace shamn
