#pragma once
// The tied HashHead (SPEC 1.2) and its fused mean cross-entropy (SPEC 1.7):
//   bucket scores  s = z table^T
//   logit[n, t]  = sum_j importance[t, j] * s[n, bucket_index[t, j]]
// No kernel forms a dense [V, D] matrix; the fused loss never holds [N, V] logits.
//
// Operands (SPEC letters; N rows):
//   z, dz: [N, D]  table, dtable: [buckets, D]  importance, dimportance: [V, h]
//   bucket_index: [V, h] int32  scores: [N, buckets]  logits, dlogits: [N, V]
//   targets: [N] int32  lse: [N] (logsumexp of each row's logits)
// Backward kernels accumulate (+=) and skip a gradient whose pointer is null. The
// float kernels give the same bits for any thread count; the `_naive` twins are
// the test oracle and the f64 path of gradient checks.
// With p = bf16 the head's three products (scores = z table^T, dz = ds table,
// dtable = ds^T z) read their operands rounded to bf16 and sum in f32, as the
// GEMM does (core/gemm.h); the gather, softmax and the scatter into ds stay f32.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/hash_embedding.h"
#include "core/product_precision.h"

namespace shamn {

// logits and the bucket scores (kept for backward).
void hash_head_forward(float* logits, float* scores, const float* z, const float* table,
                       const float* importance, const int32_t* bucket_index, int64_t n, const HashDims& dims,
                       ProductPrecision p = ProductPrecision::f32);
void hash_head_backward(float* dz, float* dtable, float* dimportance, const float* dlogits,
                        const float* scores, const float* z, const float* table, const float* importance,
                        const int32_t* bucket_index, int64_t n, const HashDims& dims,
                        ProductPrecision p = ProductPrecision::f32);
// The second step alone, from scores already computed (the inference runtime scores
// with its quantised table): logits[n, t] = sum_j importance[t, j] * scores[n, b_j],
// j in order. hash_head_forward gathers with it.
void hash_head_gather(float* logits, const float* scores, const float* importance,
                      const int32_t* bucket_index, int64_t n, const HashDims& dims);

// Each row's cross-entropy from scores already computed (the runtime's evaluation):
// loss[r] = logsumexp_t logit[r, t] - logit[r, targets[r]], by the fused loss's
// kernel, so no [n, V] logits are stored. loss: [n]
void hash_head_row_losses(double* loss, const float* scores, const float* importance,
                          const int32_t* bucket_index, const int32_t* targets, int64_t n,
                          const HashDims& dims);

// Returns the mean loss over the n rows; writes lse and the bucket scores (kept for
// backward). Works on 16 rows at a time, so it holds [16, V] logits at most.
double hash_head_cross_entropy_forward(float* lse, float* scores, const float* z, const float* table,
                                       const float* importance, const int32_t* bucket_index,
                                       const int32_t* targets, int64_t n, const HashDims& dims,
                                       ProductPrecision p = ProductPrecision::f32);
// dloss: the gradient of the mean loss. Recomputes each row's softmax from scores and lse.
void hash_head_cross_entropy_backward(float* dz, float* dtable, float* dimportance, float dloss,
                                      const float* lse, const float* scores, const float* z,
                                      const float* table, const float* importance,
                                      const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                      const HashDims& dims, ProductPrecision p = ProductPrecision::f32);

// ---------------------------------------------------------------------------------
// Naive twins: one row at a time, sums in double.

namespace detail {
// s[b] = z_row . table[b]   (z_row: [D], s: [buckets])
template <class T>
void hash_head_row_scores(double* s, const T* z_row, const T* table, const HashDims& d) {
  for (int64_t b = 0; b < d.buckets; ++b) {
    double acc = 0.0;
    for (int64_t c = 0; c < d.dim; ++c) acc += static_cast<double>(z_row[c]) * table[b * d.dim + c];
    s[b] = acc;
  }
}
template <class T>
double hash_head_row_logit(const double* s, const T* importance, const int32_t* bucket_index, int64_t t,
                           int64_t h) {
  double x = 0.0;
  for (int64_t j = 0; j < h; ++j)
    x += static_cast<double>(importance[t * h + j]) * s[bucket_index[t * h + j]];
  return x;
}
// The shared tail of both backward passes for one row: given dl = dL/dlogits of the
// row, accumulate dz, dtable, dimportance.
template <class T>
void hash_head_row_backward(T* dz_row, T* dtable, T* dimportance, const double* dl, const double* s,
                            const T* z_row, const T* table, const T* importance, const int32_t* bucket_index,
                            const HashDims& d) {
  const int64_t h = d.hashes;
  std::vector<double> ds(static_cast<size_t>(d.buckets), 0.0);
  for (int64_t t = 0; t < d.vocab; ++t)
    for (int64_t j = 0; j < h; ++j) {
      const int32_t b = bucket_index[t * h + j];
      ds[b] += static_cast<double>(importance[t * h + j]) * dl[t];
      if (dimportance) dimportance[t * h + j] += static_cast<T>(dl[t] * s[b]);
    }
  if (dz_row)
    for (int64_t c = 0; c < d.dim; ++c) {
      double acc = 0.0;
      for (int64_t b = 0; b < d.buckets; ++b) acc += ds[b] * table[b * d.dim + c];
      dz_row[c] += static_cast<T>(acc);
    }
  if (dtable)
    for (int64_t b = 0; b < d.buckets; ++b)
      for (int64_t c = 0; c < d.dim; ++c) dtable[b * d.dim + c] += static_cast<T>(ds[b] * z_row[c]);
}
}  // namespace detail

template <class T>
void hash_head_forward_naive(T* logits, T* scores, const T* z, const T* table, const T* importance,
                             const int32_t* bucket_index, int64_t n, const HashDims& d) {
  std::vector<double> s(static_cast<size_t>(d.buckets));
  for (int64_t r = 0; r < n; ++r) {
    detail::hash_head_row_scores(s.data(), z + r * d.dim, table, d);
    for (int64_t b = 0; b < d.buckets; ++b) scores[r * d.buckets + b] = static_cast<T>(s[b]);
    for (int64_t t = 0; t < d.vocab; ++t)
      logits[r * d.vocab + t] =
          static_cast<T>(detail::hash_head_row_logit(s.data(), importance, bucket_index, t, d.hashes));
  }
}

template <class T>
void hash_head_backward_naive(T* dz, T* dtable, T* dimportance, const T* dlogits, const T* scores, const T* z,
                              const T* table, const T* importance, const int32_t* bucket_index, int64_t n,
                              const HashDims& d) {
  std::vector<double> s(static_cast<size_t>(d.buckets)), dl(static_cast<size_t>(d.vocab));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < d.buckets; ++b) s[b] = scores[r * d.buckets + b];
    for (int64_t t = 0; t < d.vocab; ++t) dl[t] = dlogits[r * d.vocab + t];
    detail::hash_head_row_backward(dz ? dz + r * d.dim : nullptr, dtable, dimportance, dl.data(), s.data(),
                                   z + r * d.dim, table, importance, bucket_index, d);
  }
}

template <class T>
double hash_head_cross_entropy_forward_naive(T* lse, const T* z, const T* table, const T* importance,
                                             const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                             const HashDims& d) {
  std::vector<double> s(static_cast<size_t>(d.buckets)), x(static_cast<size_t>(d.vocab));
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    detail::hash_head_row_scores(s.data(), z + r * d.dim, table, d);
    double m = -INFINITY;
    for (int64_t t = 0; t < d.vocab; ++t) {
      x[t] = detail::hash_head_row_logit(s.data(), importance, bucket_index, t, d.hashes);
      m = x[t] > m ? x[t] : m;
    }
    double sum = 0.0;
    for (int64_t t = 0; t < d.vocab; ++t) sum += std::exp(x[t] - m);
    const double row_lse = m + std::log(sum);
    lse[r] = static_cast<T>(row_lse);
    total += row_lse - x[targets[r]];
  }
  return total / static_cast<double>(n);
}

template <class T>
void hash_head_cross_entropy_backward_naive(T* dz, T* dtable, T* dimportance, T dloss, const T* lse,
                                            const T* z, const T* table, const T* importance,
                                            const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                            const HashDims& d) {
  const double g = static_cast<double>(dloss) / static_cast<double>(n);
  std::vector<double> s(static_cast<size_t>(d.buckets)), dl(static_cast<size_t>(d.vocab));
  for (int64_t r = 0; r < n; ++r) {
    detail::hash_head_row_scores(s.data(), z + r * d.dim, table, d);
    for (int64_t t = 0; t < d.vocab; ++t)
      dl[t] = g * std::exp(detail::hash_head_row_logit(s.data(), importance, bucket_index, t, d.hashes) -
                           static_cast<double>(lse[r]));
    dl[targets[r]] -= g;
    detail::hash_head_row_backward(dz ? dz + r * d.dim : nullptr, dtable, dimportance, dl.data(), s.data(),
                                   z + r * d.dim, table, importance, bucket_index, d);
  }
}

// f64 (gradient checks): the naive twins, so an op calls one name for both dtypes.
// The cross-entropy pair recomputes the bucket scores instead of keeping them.
// Never rounded (the precision is ignored), as the f64 GEMM.
inline void hash_head_forward(double* logits, double* scores, const double* z, const double* table,
                              const double* importance, const int32_t* bucket_index, int64_t n,
                              const HashDims& dims, ProductPrecision = ProductPrecision::f32) {
  hash_head_forward_naive(logits, scores, z, table, importance, bucket_index, n, dims);
}
inline void hash_head_backward(double* dz, double* dtable, double* dimportance, const double* dlogits,
                               const double* scores, const double* z, const double* table,
                               const double* importance, const int32_t* bucket_index, int64_t n,
                               const HashDims& dims, ProductPrecision = ProductPrecision::f32) {
  hash_head_backward_naive(dz, dtable, dimportance, dlogits, scores, z, table, importance, bucket_index, n,
                           dims);
}
inline double hash_head_cross_entropy_forward(double* lse, double* /*scores*/, const double* z,
                                              const double* table, const double* importance,
                                              const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                              const HashDims& dims,
                                              ProductPrecision = ProductPrecision::f32) {
  return hash_head_cross_entropy_forward_naive(lse, z, table, importance, bucket_index, targets, n, dims);
}
inline void hash_head_cross_entropy_backward(double* dz, double* dtable, double* dimportance, double dloss,
                                             const double* lse, const double* /*scores*/, const double* z,
                                             const double* table, const double* importance,
                                             const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                             const HashDims& dims, ProductPrecision = ProductPrecision::f32) {
  hash_head_cross_entropy_backward_naive(dz, dtable, dimportance, dloss, lse, z, table, importance,
                                         bucket_index, targets, n, dims);
}

}  // namespace shamn
