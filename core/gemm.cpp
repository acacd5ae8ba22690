#include "core/gemm.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/bf16.h"
#include "core/buffer.h"
#include "core/ceil_div.h"
#include "core/check.h"
#include "core/gemm_isa.h"
#include "core/kernel_level.h"
#include "core/parallel.h"

// The float product of more than a few rows runs the packed GEMM of the kernel
// level in use (core/gemm_isa.cpp); short products and the double version run the
// row-at-a-time loops below.

namespace shamn {
namespace {

// Products with at most this many rows of op(A) skip packing: packing B costs about as
// much as multiplying a few rows by it directly (measured crossover: ~2 rows for B^T,
// where the direct path uses dot products, ~4 rows for B).
constexpr int64_t kDirectRowsBt = 2;
constexpr int64_t kDirectRowsB = 4;

const gemm_isa::Kernels* const kLevels[] = {&gemm_isa::kernels_scalar, &gemm_isa::kernels_avx2,
                                            &gemm_isa::kernels_avx512};

// Row-at-a-time GEMM without packing: the float path for very short op(A) (GEMV-like,
// where packing B would cost more than the product) and the whole double path.
// Unit u computes C[i, j0:j0+kChunk] completely (all of K, in order), so splitting
// units between threads never changes a result.
constexpr int64_t kDirectChunk = 256;

// Sum of x[k] * y[k] in a fixed order: kLanes independent partial sums (a shape the
// compiler vectorizes without reassociating) combined pairwise at the end.
template <class T>
T dot(const T* __restrict x, const T* __restrict y, int64_t n) {
  constexpr int kLanes = 64 / sizeof(T) * 4;  // four vectors' worth
  T part[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += x[k + l] * y[k + l];
  for (int l = 0; k < n; ++k, ++l) part[l] += x[k] * y[k];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  return part[0];
}

template <class T>
void gemm_direct(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t chunks = ceil_div(N, kDirectChunk);
  const int64_t unit_work = std::min(N, kDirectChunk) * K;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, unit_work));
  parallel_for(0, M * chunks, grain, [&](int64_t lo, int64_t hi) {
    alignas(64) T acc[kDirectChunk];
    std::vector<T> a_copy(ta == Trans::yes ? static_cast<size_t>(K) : 0);
    int64_t copied_row = -1;
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t i = u / chunks;
      const int64_t j0 = (u % chunks) * kDirectChunk;
      const int64_t jn = std::min(kDirectChunk, N - j0);
      const T* arow = A + i * lda;
      if (ta == Trans::yes) {  // op(A) row i is a strided column of A
        if (copied_row != i) {
          for (int64_t k = 0; k < K; ++k) a_copy[static_cast<size_t>(k)] = A[k * lda + i];
          copied_row = i;
        }
        arow = a_copy.data();
      }
      if (tb == Trans::yes) {  // op(B) column j is row j of B: dot products
        for (int64_t j = 0; j < jn; ++j) acc[j] = dot(arow, B + (j0 + j) * ldb, K);
      } else {  // rows of B scaled and accumulated
        std::fill(acc, acc + jn, T(0));
        for (int64_t k = 0; k < K; ++k) {
          const T a = arow[k];
          const T* __restrict brow = B + k * ldb + j0;
          for (int64_t j = 0; j < jn; ++j) acc[j] += a * brow[j];
        }
      }
      T* crow = C + i * ldc + j0;
      if (beta == T(0)) {
        for (int64_t j = 0; j < jn; ++j) crow[j] = alpha * acc[j];
      } else {
        for (int64_t j = 0; j < jn; ++j) crow[j] = alpha * acc[j] + beta * crow[j];
      }
    }
  });
}

// Products with a few columns of C and many rows (the routers' logits, C [4096, 20]
// for 4 groups and 16 experts): the register tile is 32 columns wide, so C's
// columns would fill under two thirds of it (bench_matmul: 0.32 against 0.37 ms
// for [4096, 20] on 2 threads). C^T = op(B)^T op(A)^T instead puts the few
// columns on the tile's rows, computed into a scratch [N, rows] and transposed
// back, in blocks of rows that run as one task each: one parallel loop per
// call, where the packed product of C^T would run two per 1,024 rows. Each
// element is the same FMA chain either way (fma(a, b, c) is fma(b, a, c)),
// with C's old values in the scratch when beta reads them, so the bits are
// those of the direct product (tests/core/test_gemm.cpp).
constexpr int64_t kFewColumns = 20;
constexpr int64_t kFewColumnsMinRows = 256;
constexpr int64_t kFewColumnsTaskRows = 256;

std::atomic<bool> few_columns{true};
bool few_columns_enabled() { return few_columns.load(std::memory_order_relaxed); }

Trans flip(Trans t) { return t == Trans::yes ? Trans::no : Trans::yes; }

template <class Packed>
void gemm_few_columns(Packed packed, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                      int64_t ldc, ProductPrecision p) {
  parallel_for(0, ceil_div(M, kFewColumnsTaskRows), 1, [&](int64_t lo, int64_t hi) {
    const SerialScope serial;
    Buffer<float> ct(N * kFewColumnsTaskRows);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t i0 = task * kFewColumnsTaskRows, m = std::min(kFewColumnsTaskRows, M - i0);
      float* c = C + i0 * ldc;
      if (beta != 0.0f)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < N; ++j) ct[j * m + i] = c[i * ldc + j];
      const float* a = A + (ta == Trans::yes ? i0 : i0 * lda);  // op(A)'s rows i0 ..
      packed(flip(tb), flip(ta), N, m, K, alpha, B, ldb, a, lda, beta, ct.data(), m, p);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = ct[j * m + i];
    }
  });
}

template <class T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + N, T(0));
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

template <class T>
void check_args(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                int64_t ldb, const T* C, int64_t ldc) {
  SHAMN_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative dimension M=", M, " N=", N, " K=", K);
  const int64_t a_cols = ta == Trans::yes ? M : K;
  const int64_t b_cols = tb == Trans::yes ? K : N;
  SHAMN_CHECK(lda >= a_cols, "gemm: lda=", lda, " is smaller than the ", a_cols, " columns of stored A",
              ta == Trans::yes ? " (transposed)" : "");
  SHAMN_CHECK(ldb >= b_cols, "gemm: ldb=", ldb, " is smaller than the ", b_cols, " columns of stored B",
              tb == Trans::yes ? " (transposed)" : "");
  SHAMN_CHECK(ldc >= N, "gemm: ldc=", ldc, " is smaller than N=", N);
  SHAMN_CHECK(C != nullptr || M == 0 || N == 0, "gemm: C is null");
  SHAMN_CHECK((A != nullptr && B != nullptr) || M == 0 || N == 0 || K == 0, "gemm: A or B is null");
}

}  // namespace

void set_gemm_few_columns(bool enabled) { few_columns.store(enabled, std::memory_order_relaxed); }

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, ProductPrecision p) {
  check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (M <= (trans_b == Trans::yes ? kDirectRowsBt : kDirectRowsB)) {
    if (p == ProductPrecision::bf16) {  // rounded copies (the packed path rounds in its panels)
      const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
      const std::vector<float> a = rounded_copy(A, ta ? K : M, ta ? M : K, lda);
      const std::vector<float> b = rounded_copy(B, tb ? N : K, tb ? K : N, ldb);
      gemm_direct(trans_a, trans_b, M, N, K, alpha, a.data(), ta ? M : K, b.data(), tb ? K : N, beta, C, ldc);
      return;
    }
    gemm_direct(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const auto packed = for_kernel_level(kLevels).packed;
  if (N <= kFewColumns && M >= kFewColumnsMinRows && few_columns_enabled())
    return gemm_few_columns(packed, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, p);
  packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, p);
}

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc, ProductPrecision) {
  check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  gemm_direct(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace shamn
