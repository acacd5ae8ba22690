#pragma once
// Internal to core/kernels: the fused hash head of one SIMD level
// (hash_head_isa.cpp, compiled per level; see core/isa.h). Arguments as in
// core/kernels/hash_head.h.
#include <cstdint>

#include "core/kernels/hash_head.h"

namespace shamn::hash_head_isa {

struct Kernels {
  void (*forward)(float* logits, float* scores, const float* z, const float* table, const float* importance,
                  const int32_t* bucket_index, int64_t n, const HashDims& dims, ProductPrecision p);
  void (*backward)(float* dz, float* dtable, float* dimportance, const float* dlogits, const float* scores,
                   const float* z, const float* table, const float* importance, const int32_t* bucket_index,
                   int64_t n, const HashDims& dims, ProductPrecision p);
  double (*cross_entropy_forward)(float* lse, float* scores, const float* z, const float* table,
                                  const float* importance, const int32_t* bucket_index,
                                  const int32_t* targets, int64_t n, const HashDims& dims,
                                  ProductPrecision p);
  void (*cross_entropy_backward)(float* dz, float* dtable, float* dimportance, float dloss, const float* lse,
                                 const float* scores, const float* z, const float* table,
                                 const float* importance, const int32_t* bucket_index, const int32_t* targets,
                                 int64_t n, const HashDims& dims, ProductPrecision p);
  void (*row_losses)(double* loss, float* lse, const float* scores, const float* importance,
                     const int32_t* bucket_index, const int32_t* targets, int64_t n, const HashDims& dims);
  // hash_head_gather's logits [n0, n0 + 16) x [t0, t1) of 16 whole rows.
  void (*gather16)(float* logits, const float* scores, const float* importance, const int32_t* bucket_index,
                   int64_t n0, int64_t t0, int64_t t1, const HashDims& dims);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::hash_head_isa
