// AVX2 path: signed x signed bytes via the sign trick, since maddubs takes one
// unsigned operand: |a| * (b with a's sign) == a * b. |a| <= 127 and b >= -127,
// so a pair sum is at most 2 * 127 * 127 and maddubs never saturates.
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// a, b: 32 signed bytes each (|a| <= 127, b != -128) -> 8 int32 partial sums.
SHAMN_TARGET_AVX2 inline __m256i partial_dot(__m256i a, __m256i b) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

template <class W, class Load>
SHAMN_TARGET_AVX2 float dot(const W* w, const BlockQ8* x, int64_t blocks, Load load_w) {
  __m256 lanes = _mm256_setzero_ps();
  const int64_t full = blocks / kLanes * kLanes;
  for (int64_t g = 0; g < full; g += kLanes) {
    __m256i partial[kLanes];
    for (int k = 0; k < kLanes; ++k) partial[k] = partial_dot(load_w(w[g + k]), load_q8(x[g + k]));
    lanes = add_group(lanes, w, x, g, block_totals(partial));
  }
  return finish(lanes, w, x, full, blocks, [&](const W& wb, const BlockQ8& xb) SHAMN_TARGET_AVX2 {
    return hsum_epi32(partial_dot(load_w(wb), load_q8(xb)));
  });
}

template <class W, class Load>
SHAMN_TARGET_AVX2 void dot_rows(const W* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y, Load load_w) {
  for (int64_t r = 0; r < rows; ++r) y[r] = dot(w + r * blocks_per_row, x, blocks_per_row, load_w);
}

}  // namespace

SHAMN_TARGET_AVX2 float dot_q8_q8_avx2(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot(a, b, blocks, [](const BlockQ8& blk) SHAMN_TARGET_AVX2 { return load_q8(blk); });
}

SHAMN_TARGET_AVX2 float dot_q4_q8_avx2(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot(w, x, blocks, [](const BlockQ4& blk) SHAMN_TARGET_AVX2 { return unpack_q4(blk); });
}

SHAMN_TARGET_AVX2 void dot_rows_q8_q8_avx2(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                                         float* y) {
  dot_rows(w, rows, blocks_per_row, x, y, [](const BlockQ8& blk) SHAMN_TARGET_AVX2 { return load_q8(blk); });
}

SHAMN_TARGET_AVX2 void dot_rows_q4_q8_avx2(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                                         float* y) {
  dot_rows(w, rows, blocks_per_row, x, y, [](const BlockQ4& blk) SHAMN_TARGET_AVX2 { return unpack_q4(blk); });
}

}  // namespace shamn::quant_detail
