// AVX-512 VNNI path: one vpdpbusd (u8 x s8, four products summed into each
// int32) per block instead of AVX2's maddubs + madd pair. vpdpbusd needs an
// unsigned left operand, so as in the AVX2 path we feed |a| and b with a's sign.
// It runs on 256-bit registers (AVX512VL): on this Zen 4 a 512-bit op is two
// 256-bit halves, and pairing blocks into zmm registers cost more shuffles
// (inserts, extracts, mask ops for the sign) than it saved; measured in
// experiments/quant_kernels.md.
#include <algorithm>

#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// a, b: 32 signed bytes each (|a| <= 127 or a >= -8, b != -128) -> 8 int32 partial sums.
SHAMN_TARGET_AVX512 inline __m256i partial_dot(__m256i a, __m256i b) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// One block pair's partial sums, for Q8 and Q4 weights.
const auto q8_pair = [](const BlockQ8& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX512 { return partial_dot(load_q8(w), load_q8(x)); };
const auto q4_pair = [](const BlockQ4& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX512 { return partial_dot(unpack_q4(w), load_q8(x)); };

}  // namespace

SHAMN_TARGET_AVX512 float dot_q8_q8_avx512(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot_blocks(a, b, blocks, q8_pair);
}

SHAMN_TARGET_AVX512 float dot_q4_q8_avx512(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot_blocks(w, x, blocks, q4_pair);
}

SHAMN_TARGET_AVX512 void dot_rows_q8_q8_avx512(const BlockQ8* w, int64_t rows, int64_t blocks_per_row,
                                               const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q8_pair);
}

SHAMN_TARGET_AVX512 void dot_rows_q4_q8_avx512(const BlockQ4* w, int64_t rows, int64_t blocks_per_row,
                                               const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q4_pair);
}

namespace {

// Block b of x exactly as the scalar path rounds it: q = x / d rounded half
// away from zero, clamped to [-127, 127]. Taken when the reciprocal cannot be
// trusted. Returns the block's values summed in 16 int32 lanes.
SHAMN_TARGET_AVX512 __m512i quantize_block_exact(const __m512* v, float d, BlockQ8& out) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < 2; ++k) {
    const __m512 s = _mm512_div_ps(v[k], _mm512_set1_ps(d));
    __m512 r = _mm512_roundscale_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 away = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, r)), half, _CMP_GE_OQ);
    // copysign(1, s), in integer ops (and_ps/or_ps would need AVX512DQ).
    const __m512 step = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(s), sign), _mm512_castps_si512(one)));
    r = _mm512_mask_add_ps(r, away, r, step);
    const __m512i q = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + 16 * k), _mm512_cvtepi32_epi8(q));
    sum = _mm512_add_epi32(sum, q);
  }
  return sum;
}

// v[b] (16 vectors) -> one vector whose lane b is op over v[b]'s 16 lanes: a
// tree of 15 lane-crossing steps instead of a 4-step horizontal reduction per
// vector. Op is max or add on values where either is exact (maxima; sums of
// at most 32 values of magnitude <= 127, integers below 2^24).
template <class Op>
SHAMN_TARGET_AVX512 __m512 reduce_each(const __m512* v, Op op) {
  __m512 c[8], e[4], g[2];
  // [a0 a1 a2 a3] (128-bit chunks) with [b0 b1 b2 b3] -> [a0+a2, a1+a3, b0+b2, b1+b3]
  for (int p = 0; p < 8; ++p)
    c[p] = op(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
              _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
  // -> chunk k of e[q] is block 4q + k's four partial lanes
  for (int q = 0; q < 4; ++q)
    e[q] = op(_mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // -> chunk k of g[s]: lanes 0-1 block 8s + k, lanes 2-3 block 8s + 4 + k
  for (int t = 0; t < 2; ++t)
    g[t] = op(_mm512_shuffle_ps(e[2 * t], e[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(e[2 * t], e[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // -> chunk k, lane m: block 4m + k
  const __m512 r = op(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // lane b takes block b from lane 4 * (b % 4) + b / 4
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, r);
}

// d = max |x| / 127 and its inverse for the (up to) 16 blocks of x from b0: the
// maxima of 16 blocks reduced together (reduce_each), one division for all d
// and one for all inverses.
struct GroupScales {
  alignas(64) float d[16];
  alignas(64) float inv[16];
};

SHAMN_TARGET_AVX512 void group_scales_avx512(const float* x, int64_t n, int64_t b0, int64_t nb, float* buf,
                                             GroupScales& out) {
  const auto max = [](__m512 a, __m512 b) SHAMN_TARGET_AVX512 { return _mm512_max_ps(a, b); };
  __m512 m[16];
  for (int64_t i = 0; i < 16; ++i) {
    if (i >= nb) {
      m[i] = _mm512_setzero_ps();
      continue;
    }
    const float* src = q8_source_block(x, n, b0 + i, buf);
    m[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src)), _mm512_abs_ps(_mm512_loadu_ps(src + 16)));
  }
  const __m512 d16 = _mm512_div_ps(reduce_each(m, max), _mm512_set1_ps(127.0f));
  _mm512_store_ps(out.d, d16);
  // Lanes with d = 0 divide by zero here; those blocks never read their inverse.
  _mm512_store_ps(out.inv, _mm512_div_ps(_mm512_set1_ps(1.0f), d16));
}

// One block from its two vectors v (zero past the row's end), with d = max |x|
// / 127 and inv = 1 / d: the fast path below, or the exact one. Returns the
// block's values summed in 16 int32 lanes.
SHAMN_TARGET_AVX512 inline __m512i quantize_block(const __m512* v, float d, float inv, BlockQ8& out) {
  out.d = d;
  if (d == 0.0f) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q), _mm256_setzero_si256());
    return _mm512_setzero_si512();
  }
  const __m512 near = _mm512_set1_ps(0.5f - kHalfMargin);
  const __m512 vinv = _mm512_set1_ps(inv);
  // s rounded to the nearest integer, and back to float for the distance: a
  // NaN or infinite s converts to INT_MIN, so its distance is NaN or infinite
  // and the block goes to the exact path.
  __m512i q[2];
  __mmask16 near_half = 0;
  for (int k = 0; k < 2; ++k) {
    const __m512 s = _mm512_mul_ps(v[k], vinv);
    q[k] = _mm512_cvt_roundps_epi32(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_cvtepi32_ps(q[k]);
    near_half |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, r)), near, _CMP_NLT_UQ);
  }
  if (near_half) return quantize_block_exact(v, d, out);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q), _mm512_cvtepi32_epi8(q[0]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + 16), _mm512_cvtepi32_epi8(q[1]));
  return _mm512_add_epi32(q[0], q[1]);
}

// A row of one block: a LoRA adapter's t = A x (r <= 32 values), quantised
// once a token for each adapted matrix, where group_scales_avx512's reduction
// of 16 blocks' maxima, all but one empty, took most of the time. The maximum
// is reduced in reduce_each's order (the same pairs, the same operand first),
// so a NaN gives the same d as on the group path.
SHAMN_TARGET_AVX512 void quantize_one_block(const float* x, int64_t n, BlockQ8& out, int32_t* sums) {
  const auto mask = [](int64_t len) {
    return static_cast<__mmask16>(len >= 16 ? 0xFFFF : len <= 0 ? 0 : (1u << len) - 1);
  };
  const __m512 v[2] = {_mm512_maskz_loadu_ps(mask(n), x), _mm512_maskz_loadu_ps(mask(n - 16), x + 16)};
  const __m512 m = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1]));
  const __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(m),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1)));
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  const __m128 m2 = _mm_max_ps(_mm_shuffle_ps(m4, m4, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm_shuffle_ps(m4, m4, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m128 m1 = _mm_max_ps(_mm_shuffle_ps(m2, m2, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm_shuffle_ps(m2, m2, _MM_SHUFFLE(3, 1, 3, 1)));
  const float d = _mm_cvtss_f32(m1) / 127.0f;
  const __m512i sum = quantize_block(v, d, 1.0f / d, out);
  if (sums) sums[0] = _mm512_reduce_add_epi32(sum);
}

}  // namespace

// Two zmm registers per block. The fast path rounds x * (1 / d) to nearest
// (even) in the conversion itself: that is the scalar path's integer whenever
// x * (1 / d) is farther than kHalfMargin from a half (ties, where the two
// rules differ, are halves too), and |x * (1 / d)| <= 127 + 2.3e-5 needs no
// clamp. A block with a value near a half, or a non-finite 1 / d (the
// distance is then NaN), is redone by exact division. Blocks go 16 at a time
// (group_scales_avx512); the next group's scales are computed before this group's
// values, so their chain of maxima, reductions and two divisions overlaps
// this group's rounding instead of stalling every group (1.6x on 512-wide rows).
SHAMN_TARGET_AVX512 void quantize_row_q8_avx512(const float* x, BlockQ8* out, int32_t* sums, int64_t n) {
  const int64_t blocks = quant_blocks(n);
  if (blocks == 1) return quantize_one_block(x, n, out[0], sums);
  const auto add = [](__m512 a, __m512 b) SHAMN_TARGET_AVX512 { return _mm512_add_ps(a, b); };
  constexpr int64_t kGroup = 16;
  float buf[kQuantBlock];
  GroupScales scales[2];
  if (blocks > 0) group_scales_avx512(x, n, 0, std::min(kGroup, blocks), buf, scales[0]);
  for (int64_t b0 = 0, g = 0; b0 < blocks; b0 += kGroup, g ^= 1) {
    const int64_t nb = std::min(kGroup, blocks - b0);
    if (b0 + kGroup < blocks)
      group_scales_avx512(x, n, b0 + kGroup, std::min(kGroup, blocks - b0 - kGroup), buf, scales[g ^ 1]);
    const GroupScales& sc = scales[g];
    __m512 part[kGroup];  // each block's values summed in 16 lanes (as floats, exactly)
    for (int64_t i = 0; i < kGroup; ++i) {
      part[i] = _mm512_setzero_ps();
      if (i >= nb) continue;
      const int64_t b = b0 + i;
      const float* src = q8_source_block(x, n, b, buf);
      const __m512 v[2] = {_mm512_loadu_ps(src), _mm512_loadu_ps(src + 16)};
      part[i] = _mm512_cvtepi32_ps(quantize_block(v, sc.d[i], sc.inv[i], out[b]));
    }
    if (sums)
      _mm512_mask_storeu_epi32(sums + b0, static_cast<__mmask16>((1u << nb) - 1),
                               _mm512_cvtps_epi32(reduce_each(part, add)));
  }
}

SHAMN_TARGET_AVX512 void add_scaled_q8_avx512(const BlockQ8* in, int64_t blocks, float w, float* acc) {
  const __m512 vw = _mm512_set1_ps(w);
  for (int64_t j = 0; j < blocks; ++j) {
    const __m512 d = _mm512_set1_ps(in[j].d);
    float* a = acc + j * kQuantBlock;
    for (int k = 0; k < 2; ++k) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[j].q + 16 * k));
      const __m512 v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
      _mm512_storeu_ps(a + 16 * k, _mm512_fmadd_ps(vw, v, _mm512_loadu_ps(a + 16 * k)));
    }
  }
}

}  // namespace shamn::quant_detail
