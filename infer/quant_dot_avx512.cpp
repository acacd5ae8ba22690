// AVX-512 VNNI path: two blocks per 512-bit register and one vpdpbusd (u8 x s8,
// four products summed into each int32) per pair. vpdpbusd needs an unsigned
// left operand, so as in the AVX2 path we feed |a| and b negated where a < 0.
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// Two blocks side by side: lo in bytes 0..31, hi in 32..63.
SHAMN_TARGET_AVX512 inline __m512i pair(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// 64 signed bytes each -> 16 int32 partial sums (8 per block).
SHAMN_TARGET_AVX512 inline __m512i partial_dot(__m512i a, __m512i b) {
  const __mmask64 negative = _mm512_movepi8_mask(a);
  const __m512i b_signed = _mm512_mask_sub_epi8(b, negative, _mm512_setzero_si512(), b);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(a), b_signed);
}

template <class W, class Load>
SHAMN_TARGET_AVX512 float dot(const W* w, const BlockQ8* x, int64_t blocks, Load load_w) {
  __m256 lanes = _mm256_setzero_ps();
  const int64_t full = blocks / kLanes * kLanes;
  for (int64_t g = 0; g < full; g += kLanes) {
    __m256i partial[kLanes];
    for (int k = 0; k < kLanes; k += 2) {
      const __m512i p = partial_dot(pair(load_w(w[g + k]), load_w(w[g + k + 1])),
                                    pair(load_q8(x[g + k]), load_q8(x[g + k + 1])));
      partial[k] = _mm512_castsi512_si256(p);
      partial[k + 1] = _mm512_extracti64x4_epi64(p, 1);
    }
    lanes = add_group(lanes, w, x, g, block_totals(partial));
  }
  return finish(lanes, w, x, full, blocks);
}

}  // namespace

SHAMN_TARGET_AVX512 float dot_q8_q8_avx512(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot(a, b, blocks, [](const BlockQ8& blk) SHAMN_TARGET_AVX512 { return load_q8(blk); });
}

SHAMN_TARGET_AVX512 float dot_q4_q8_avx512(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot(w, x, blocks, [](const BlockQ4& blk) SHAMN_TARGET_AVX512 { return unpack_q4(blk); });
}

}  // namespace shamn::quant_detail
