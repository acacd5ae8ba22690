// AVX-512 VNNI path: one vpdpbusd (u8 x s8, four products summed into each
// int32) per block instead of AVX2's maddubs + madd pair. vpdpbusd needs an
// unsigned left operand, so as in the AVX2 path we feed |a| and b with a's sign.
// It runs on 256-bit registers (AVX512VL): on this Zen 4 a 512-bit op is two
// 256-bit halves, and pairing blocks into zmm registers cost more shuffles
// (inserts, extracts, mask ops for the sign) than it saved; measured in
// experiments/quant_kernels.md.
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// a, b: 32 signed bytes each (|a| <= 127 or a >= -8, b != -128) -> 8 int32 partial sums.
SHAMN_TARGET_AVX512 inline __m256i partial_dot(__m256i a, __m256i b) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

template <class W, class Load>
SHAMN_TARGET_AVX512 float dot(const W* w, const BlockQ8* x, int64_t blocks, Load load_w) {
  __m256 lanes = _mm256_setzero_ps();
  const int64_t full = blocks / kLanes * kLanes;
  for (int64_t g = 0; g < full; g += kLanes) {
    __m256i partial[kLanes];
    for (int k = 0; k < kLanes; ++k) partial[k] = partial_dot(load_w(w[g + k]), load_q8(x[g + k]));
    lanes = add_group(lanes, w, x, g, block_totals(partial));
  }
  return finish(lanes, w, x, full, blocks, [&](const W& wb, const BlockQ8& xb) SHAMN_TARGET_AVX512 {
    return hsum_epi32(partial_dot(load_w(wb), load_q8(xb)));
  });
}

template <class W, class Load>
SHAMN_TARGET_AVX512 void dot_rows(const W* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y, Load load_w) {
  const int64_t bpr = blocks_per_row;
  int64_t r0 = 0;
  if (bpr < kLanes) r0 = short_rows(w, rows / kLanes * kLanes, bpr, x, y, [&](const W& wb, const BlockQ8& xb) SHAMN_TARGET_AVX512 {
      return partial_dot(load_w(wb), load_q8(xb));
    });
  for (int64_t r = r0; r < rows; ++r) y[r] = dot(w + r * bpr, x, bpr, load_w);
}

}  // namespace

SHAMN_TARGET_AVX512 float dot_q8_q8_avx512(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot(a, b, blocks, [](const BlockQ8& blk) SHAMN_TARGET_AVX512 { return load_q8(blk); });
}

SHAMN_TARGET_AVX512 float dot_q4_q8_avx512(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot(w, x, blocks, [](const BlockQ4& blk) SHAMN_TARGET_AVX512 { return unpack_q4(blk); });
}

SHAMN_TARGET_AVX512 void dot_rows_q8_q8_avx512(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                                         float* y) {
  dot_rows(w, rows, blocks_per_row, x, y, [](const BlockQ8& blk) SHAMN_TARGET_AVX512 { return load_q8(blk); });
}

SHAMN_TARGET_AVX512 void dot_rows_q4_q8_avx512(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                                         float* y) {
  dot_rows(w, rows, blocks_per_row, x, y, [](const BlockQ4& blk) SHAMN_TARGET_AVX512 { return unpack_q4(blk); });
}

}  // namespace shamn::quant_detail
