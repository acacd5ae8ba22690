#pragma once
// General matrix multiply on row-major operands:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C[M,N]
// op(A) = A (A stored [M,K], row stride lda >= K) or A^T (A stored [K,M], lda >= M);
// op(B) = B (B stored [K,N], ldb >= N) or B^T (B stored [N,K], ldb >= K).
// beta == 0 overwrites C without reading it (NaNs in C do not propagate).
// With p = bf16 the product reads A and B rounded to bf16 and sums in f32
// (train.precision, core/product_precision.h): the packed path in pairs of k,
// as vdpbf16ps adds them (on it where the CPU has AVX512_BF16), a short
// product (a few rows, unpacked) in k order over rounded copies.
//
// The float version is the fast one (packed panels, SIMD micro-kernel, parallel
// over tiles of C with oneTBB). Each element of C is summed over K in a fixed order
// by exactly one task, so results do not depend on the thread count.
#include <cstdint>

#include "core/product_precision.h"

namespace shamn {

enum class Trans : bool { no = false, yes = true };

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          ProductPrecision p = ProductPrecision::f32);

// Products of at most 16 columns of C and 256 rows or more run as C^T =
// op(B)^T op(A)^T (the packed tile is 32 columns wide), with the same bits.
// Tests turn it off to compare the two; on by default.
void set_gemm_few_columns(bool enabled);

// Double precision, for gradient checks: straightforward, not tuned; never
// rounded (p is ignored).
void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc,
          ProductPrecision p = ProductPrecision::f32);

// The slow, obvious triple loop (accumulating in double): the test oracle.
template <class T>
void gemm_naive(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const T a = trans_a == Trans::yes ? A[k * lda + i] : A[i * lda + k];
        const T b = trans_b == Trans::yes ? B[j * ldb + k] : B[k * ldb + j];
        acc += static_cast<double>(a) * static_cast<double>(b);
      }
      const double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * acc + prev);
    }
}

}  // namespace shamn
