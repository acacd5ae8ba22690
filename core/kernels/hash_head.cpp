#include "core/kernels/hash_head.h"

#include <algorithm>
#include <cmath>

#include "core/ceil_div.h"
#include "core/kernel_level.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/hash_head_isa.h"
#include "core/parallel.h"

// The fused head runs the kernels of the level in use (hash_head_isa.cpp).

namespace shamn {
namespace {

const hash_head_isa::Kernels* const kLevels[] = {&hash_head_isa::kernels_scalar, &hash_head_isa::kernels_avx2,
                                                 &hash_head_isa::kernels_avx512};

// Tokens per gather task: a decode step (one row) still spreads over the threads.
constexpr int64_t kGatherTokens = 2048;
// Tokens per task of 16 rows gathered together (the level's gather16): its
// slab of the rows' scores is built once per task, so tasks are long, but
// split down to kGather16MinTokens while there are fewer than two a thread.
constexpr int64_t kGather16Tokens = 8192;
constexpr int64_t kGather16MinTokens = 512;

}  // namespace

// Whole groups of 16 rows (a batch of streams, a prompt's rows) go through the
// level's gather16, 16 rows a lane each; the rows left over, a row at a time
// in scalar code at the baseline (the loads are gathers, which wider registers
// do not speed up). Both give every logit the same bits.
void hash_head_gather(float* logits, const float* scores, const float* importance,
                      const int32_t* bucket_index, int64_t n, const HashDims& d) {
  const int64_t groups = n / 16;
  int64_t blocks16 = ceil_div(d.vocab, kGather16Tokens);
  if (groups > 0)
    blocks16 =
        std::max(blocks16, std::min(ceil_div(2 * num_threads(), groups), d.vocab / kGather16MinTokens));
  const int64_t tokens16 = ceil_div(ceil_div(d.vocab, blocks16), 16) * 16;
  blocks16 = ceil_div(d.vocab, tokens16);
  const auto gather16 = for_kernel_level(kLevels).gather16;
  parallel_for(0, groups * blocks16, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t t0 = task % blocks16 * tokens16;
      gather16(logits, scores, importance, bucket_index, task / blocks16 * 16, t0,
               std::min(d.vocab, t0 + tokens16), d);
    }
  });
  const int64_t r0 = groups * 16;
  const int64_t h = d.hashes, blocks = ceil_div(d.vocab, kGatherTokens);
  parallel_for(0, (n - r0) * blocks, row_grain(kGatherTokens * h), [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t r = r0 + task / blocks, t0 = task % blocks * kGatherTokens;
      const int64_t t1 = std::min(d.vocab, t0 + kGatherTokens);
      const float* __restrict s = scores + r * d.buckets;
      float* __restrict out = logits + r * d.vocab;
      // Explicit fmas, as gather16's: left to the compiler, an -O1 build (the
      // sanitizers') rounds the product and the sum apart.
      if (h == 2) {  // the default: a loop of known trip count
        for (int64_t t = t0; t < t1; ++t) {
          const float x = importance[2 * t] * s[bucket_index[2 * t]];
          out[t] = std::fma(importance[2 * t + 1], s[bucket_index[2 * t + 1]], x);
        }
        continue;
      }
      for (int64_t t = t0; t < t1; ++t) {
        float x = importance[t * h] * s[bucket_index[t * h]];
        for (int64_t j = 1; j < h; ++j) x = std::fma(importance[t * h + j], s[bucket_index[t * h + j]], x);
        out[t] = x;
      }
    }
  });
}

void hash_head_row_losses(double* loss, const float* scores, const float* importance,
                          const int32_t* bucket_index, const int32_t* targets, int64_t n,
                          const HashDims& dims) {
  for_kernel_level(kLevels).row_losses(loss, nullptr, scores, importance, bucket_index, targets, n, dims);
}

void hash_head_forward(float* logits, float* scores, const float* z, const float* table,
                       const float* importance, const int32_t* bucket_index, int64_t n, const HashDims& dims,
                       ProductPrecision p) {
  for_kernel_level(kLevels).forward(logits, scores, z, table, importance, bucket_index, n, dims, p);
}

void hash_head_backward(float* dz, float* dtable, float* dimportance, const float* dlogits,
                        const float* scores, const float* z, const float* table, const float* importance,
                        const int32_t* bucket_index, int64_t n, const HashDims& dims, ProductPrecision p) {
  for_kernel_level(kLevels).backward(dz, dtable, dimportance, dlogits, scores, z, table, importance,
                                     bucket_index, n, dims, p);
}

double hash_head_cross_entropy_forward(float* lse, float* scores, const float* z, const float* table,
                                       const float* importance, const int32_t* bucket_index,
                                       const int32_t* targets, int64_t n, const HashDims& dims,
                                       ProductPrecision p) {
  return for_kernel_level(kLevels).cross_entropy_forward(lse, scores, z, table, importance, bucket_index,
                                                         targets, n, dims, p);
}

void hash_head_cross_entropy_backward(float* dz, float* dtable, float* dimportance, float dloss,
                                      const float* lse, const float* scores, const float* z,
                                      const float* table, const float* importance,
                                      const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                      const HashDims& dims, ProductPrecision p) {
  for_kernel_level(kLevels).cross_entropy_backward(dz, dtable, dimportance, dloss, lse, scores, z, table,
                                                   importance, bucket_index, targets, n, dims, p);
}

}  // namespace shamn
