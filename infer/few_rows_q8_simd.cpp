// The AVX-512 VNNI path of few_rows_q8_batch (infer/few_rows_q8.h): rows u
// and u + 1 of x in the two halves of each register, a block's 8 groups of 4
// values taken from two 16-byte broadcasts by in-lane shuffles.
#include <algorithm>

#include "infer/few_rows_q8.h"
#include "infer/quant_dot_paths.h"
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// 16 bytes of row u's values in lanes 0-7 (twice), row u + 1's in lanes 8-15,
// flipped to unsigned (x + 128: the weights' offset takes 128 * sum(w) back off).
SHAMN_TARGET_AVX512 inline __m512i two_rows_quarter(const int8_t* a, const int8_t* b) {
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Group g of a block's packed weights: rows 0-7 in lanes 0-7 and again in 8-15.
SHAMN_TARGET_AVX512 inline __m512i group_weights(const int8_t* block, int g) {
  return _mm512_loadu_si512(block + g * 2 * FewRowsQ8::kMaxRows * 4);
}

}  // namespace

SHAMN_TARGET_AVX512 void few_rows_q8_batch_avx512(const FewRowsQ8& w, const Q8Rows& x, float* t,
                                                  int64_t t_stride) {
  constexpr int64_t kR = FewRowsQ8::kMaxRows;
  const int64_t bpr = w.blocks;
  const int used = static_cast<int>(std::min<int64_t>(kLanes, bpr));
  const auto rows_mask = static_cast<__mmask8>((1u << w.rows) - 1);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t u = 0; u < x.n; u += 2) {
    const bool pair = u + 1 < x.n;
    const BlockQ8* x0 = x.row(u);
    const BlockQ8* x1 = x.row(pair ? u + 1 : u);
    __m512 lane[kLanes];
    for (int64_t j = 0; j < bpr; ++j) {
      const __m512i q0 = two_rows_quarter(x0[j].q, x1[j].q);
      const __m512i q1 = two_rows_quarter(x0[j].q + 16, x1[j].q + 16);
      const int8_t* wj = w.packed.data() + j * (kQuantBlock / 4) * 2 * kR * 4;
      // Two sums halve the chain of dependent vpdpbusd (integers: the order is free).
      __m512i acc0 = _mm512_loadu_si512(w.offset.data() + j * 2 * kR), acc1 = _mm512_setzero_si512();
      acc0 = _mm512_dpbusd_epi32(acc0, _mm512_shuffle_epi32(q0, _MM_PERM_AAAA), group_weights(wj, 0));
      acc1 = _mm512_dpbusd_epi32(acc1, _mm512_shuffle_epi32(q0, _MM_PERM_BBBB), group_weights(wj, 1));
      acc0 = _mm512_dpbusd_epi32(acc0, _mm512_shuffle_epi32(q0, _MM_PERM_CCCC), group_weights(wj, 2));
      acc1 = _mm512_dpbusd_epi32(acc1, _mm512_shuffle_epi32(q0, _MM_PERM_DDDD), group_weights(wj, 3));
      acc0 = _mm512_dpbusd_epi32(acc0, _mm512_shuffle_epi32(q1, _MM_PERM_AAAA), group_weights(wj, 4));
      acc1 = _mm512_dpbusd_epi32(acc1, _mm512_shuffle_epi32(q1, _MM_PERM_BBBB), group_weights(wj, 5));
      acc0 = _mm512_dpbusd_epi32(acc0, _mm512_shuffle_epi32(q1, _MM_PERM_CCCC), group_weights(wj, 6));
      acc1 = _mm512_dpbusd_epi32(acc1, _mm512_shuffle_epi32(q1, _MM_PERM_DDDD), group_weights(wj, 7));
      const __m512 xd = _mm512_mask_mov_ps(_mm512_set1_ps(x0[j].d), 0xFF00, _mm512_set1_ps(x1[j].d));
      const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(w.d.data() + j * 2 * kR), xd);
      const int k = static_cast<int>(j % kLanes);
      lane[k] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(acc0, acc1)),
                                j < kLanes ? zero : lane[k]);
    }
    // The canonical sum: lanes left to right, then +0 once for the empty ones.
    __m512 sum = lane[0];
    for (int k = 1; k < used; ++k) sum = _mm512_add_ps(sum, lane[k]);
    if (used < kLanes) sum = _mm512_add_ps(sum, zero);
    _mm256_mask_storeu_ps(t + u * t_stride, rows_mask, _mm512_castps512_ps256(sum));
    if (pair)
      _mm256_mask_storeu_ps(t + (u + 1) * t_stride, rows_mask,
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)));
  }
}

}  // namespace shamn::quant_detail
