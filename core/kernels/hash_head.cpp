#include "core/kernels/hash_head.h"

#include "core/kernel_level.h"
#include "core/kernels/hash_head_isa.h"

// The fused head runs the kernels of the level in use (hash_head_isa.cpp).

namespace shamn {
namespace {

const hash_head_isa::Kernels* const kLevels[] = {&hash_head_isa::kernels_scalar, &hash_head_isa::kernels_avx2,
                                                 &hash_head_isa::kernels_avx512};

}  // namespace

void hash_head_forward(float* logits, float* scores, const float* z, const float* table,
                       const float* importance, const int32_t* bucket_index, int64_t n,
                       const HashDims& dims) {
  for_kernel_level(kLevels).forward(logits, scores, z, table, importance, bucket_index, n, dims);
}

void hash_head_backward(float* dz, float* dtable, float* dimportance, const float* dlogits,
                        const float* scores, const float* z, const float* table, const float* importance,
                        const int32_t* bucket_index, int64_t n, const HashDims& dims) {
  for_kernel_level(kLevels).backward(dz, dtable, dimportance, dlogits, scores, z, table, importance,
                                     bucket_index, n, dims);
}

double hash_head_cross_entropy_forward(float* lse, float* scores, const float* z, const float* table,
                                       const float* importance, const int32_t* bucket_index,
                                       const int32_t* targets, int64_t n, const HashDims& dims) {
  return for_kernel_level(kLevels).cross_entropy_forward(lse, scores, z, table, importance, bucket_index,
                                                         targets, n, dims);
}

void hash_head_cross_entropy_backward(float* dz, float* dtable, float* dimportance, float dloss,
                                      const float* lse, const float* scores, const float* z,
                                      const float* table, const float* importance,
                                      const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                      const HashDims& dims) {
  for_kernel_level(kLevels).cross_entropy_backward(dz, dtable, dimportance, dloss, lse, scores, z, table,
                                                   importance, bucket_index, targets, n, dims);
}

}  // namespace shamn
