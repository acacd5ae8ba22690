#pragma once
// Internal to core/: the packed float GEMM of one SIMD level (gemm_isa.cpp,
// compiled per level; see core/isa.h). Arguments as gemm() in core/gemm.h, with
// M > 0, N > 0, K > 0 and alpha != 0.
#include <cstdint>

#include "core/gemm.h"

namespace shamn::gemm_isa {

struct Kernels {
  void (*packed)(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                 ProductPrecision p);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::gemm_isa
