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

// One block pair's partial sums, for Q8 and Q4 weights.
const auto q8_pair = [](const BlockQ8& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX2 { return partial_dot(load_q8(w), load_q8(x)); };
const auto q4_pair = [](const BlockQ4& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX2 { return partial_dot(unpack_q4(w), load_q8(x)); };

}  // namespace

SHAMN_TARGET_AVX2 float dot_q8_q8_avx2(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot_blocks(a, b, blocks, q8_pair);
}

SHAMN_TARGET_AVX2 float dot_q4_q8_avx2(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot_blocks(w, x, blocks, q4_pair);
}

SHAMN_TARGET_AVX2 void dot_rows_q8_q8_avx2(const BlockQ8* w, int64_t rows, int64_t blocks_per_row,
                                           const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q8_pair);
}

SHAMN_TARGET_AVX2 void dot_rows_q4_q8_avx2(const BlockQ4* w, int64_t rows, int64_t blocks_per_row,
                                           const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q4_pair);
}

SHAMN_TARGET_AVX2 void add_scaled_q8_avx2(const BlockQ8* in, int64_t blocks, float w, float* acc) {
  const __m256 vw = _mm256_set1_ps(w);
  for (int64_t j = 0; j < blocks; ++j) {
    const __m256 d = _mm256_set1_ps(in[j].d);
    float* a = acc + j * kQuantBlock;
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in[j].q + 8 * k));
      const __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
      _mm256_storeu_ps(a + 8 * k, _mm256_fmadd_ps(vw, v, _mm256_loadu_ps(a + 8 * k)));
    }
  }
}

}  // namespace shamn::quant_detail

namespace shamn::quant_detail {

// The same arithmetic as the scalar quantize_row_q8, eight values at a time:
// max|x| (exact in any order), d = amax / 127, v = x / d, round half away from
// zero via trunc, clamp, then pack to bytes. Bitwise equal to the scalar path.
SHAMN_TARGET_AVX2 void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  float buf[kQuantBlock];
  for (int64_t b = 0; b < quant_blocks(n); ++b) {
    const float* src = q8_source_block(x, n, b, buf);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(src + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[k]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    out[b].d = d;
    if (d == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), _mm256_setzero_si256());
      continue;
    }
    // By reciprocal where that is exact (kHalfMargin): division is slow, and was
    // a sixth of a batched prefill.
    const __m256 vd = _mm256_set1_ps(d), inv = _mm256_set1_ps(1.0f / d);
    __m256 fast[4];
    __m256 near_half = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      fast[k] = _mm256_mul_ps(v[k], inv);
      const __m256 a = _mm256_andnot_ps(sign_mask, fast[k]);
      const __m256 frac = _mm256_sub_ps(a, _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
      const __m256 gap = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(frac, half));
      near_half = _mm256_or_ps(near_half, _mm256_cmp_ps(gap, _mm256_set1_ps(kHalfMargin), _CMP_NGE_UQ));
    }
    const bool exact = _mm256_movemask_ps(near_half) != 0;
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 s = exact ? _mm256_div_ps(v[k], vd) : fast[k];
      __m256 r = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 away = _mm256_cmp_ps(_mm256_andnot_ps(sign_mask, _mm256_sub_ps(s, r)), half, _CMP_GE_OQ);
      r = _mm256_add_ps(r, _mm256_and_ps(away, _mm256_or_ps(_mm256_and_ps(s, sign_mask), one)));
      q[k] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    // packs work within 128-bit halves; the permute restores element order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), ordered);
  }
}

}  // namespace shamn::quant_detail
