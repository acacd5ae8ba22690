// The product-key selection's inner loops, compiled once per SIMD level
// (core/isa.h): at AVX-512 a compare covers 16 lanes where the baseline build
// took two 8-lane halves, and the scores above a bar are compress-stored 16 at
// a time instead of one per iteration.
#include "core/kernels/product_key_isa.h"

#include <algorithm>
#include <cstring>

#include "core/isa.h"

#if SHAMN_ISA_SIMD == 2
#include <immintrin.h>
#endif

SHAMN_ISA_BEGIN
namespace {

using product_key_isa::kRankLanes;
using product_key_isa::Scored;

// An entry's rank as one signed 64-bit integer, so that ranking above (a higher
// score, or an equal score and a lower id) is one integer compare: the score's
// bits in the high half, ordered as integers (a negative float's magnitude bits
// flipped; -0 is first made +0, which it equals as a float), INT32_MAX - id in
// the low half. One compare instead of three (two float, one id) and their mask
// merges; with the branch-free stores below, `bench_memory` fwd/select ran 1.7x
// faster on Zen 5 (experiments/inference.md).
inline int64_t rank_key(const Scored& e) {
  const float s = e.s + 0.0f;
  int32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  bits ^= (bits >> 31) & 0x7FFFFFFF;
  return static_cast<int64_t>(static_cast<uint64_t>(static_cast<int64_t>(bits)) << 32) |
         static_cast<int64_t>(static_cast<uint32_t>(INT32_MAX - e.id));
}

// m*m compares without a branch, kRankLanes entries at a time in vector lanes;
// for the few dozen entries left here that beats nth_element + sort.
void rank_select(const Scored* buf, int64_t m, int64_t k, Scored* out, int64_t* keys) {
  for (int64_t i = 0; i < m; ++i) keys[i] = rank_key(buf[i]);
  for (int64_t i = m; i % kRankLanes != 0; ++i) keys[i] = 0;  // padding lanes: counted, never stored
  for (int64_t i0 = 0; i0 < m; i0 += kRankLanes) {
    int64_t ki[kRankLanes], above[kRankLanes] = {};
    for (int64_t l = 0; l < kRankLanes; ++l) ki[l] = keys[i0 + l];
#if SHAMN_ISA_SIMD == 2
    // A compare into a mask and a masked subtract of -1 per 8 lanes (GCC makes
    // the count's add three instructions: mask to vector, then add).
    const __m512i k0 = _mm512_loadu_si512(ki), k1 = _mm512_loadu_si512(ki + 8),
                  minus1 = _mm512_set1_epi64(-1);
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    for (int64_t j = 0; j < m; ++j) {
      const __m512i kj = _mm512_set1_epi64(keys[j]);
      a0 = _mm512_mask_sub_epi64(a0, _mm512_cmpgt_epi64_mask(kj, k0), a0, minus1);
      a1 = _mm512_mask_sub_epi64(a1, _mm512_cmpgt_epi64_mask(kj, k1), a1, minus1);
    }
    _mm512_storeu_si512(above, a0);
    _mm512_storeu_si512(above + 8, a1);
#else
    for (int64_t j = 0; j < m; ++j) {
      const int64_t kj = keys[j];
      // Keeps GCC 12 on one vector compare-and-add per j (it otherwise unrolls this
      // into scalar code and the selection runs 40% slower).
#pragma GCC unroll 1
      for (int64_t l = 0; l < kRankLanes; ++l) above[l] += static_cast<int64_t>(kj > ki[l]);
    }
#endif
    // Entries ranked k or lower all go to out[k], so the stores take no branch.
    const int64_t lanes = std::min(kRankLanes, m - i0);
    for (int64_t l = 0; l < lanes; ++l) out[std::min(above[l], k)] = buf[i0 + l];
  }
}

int64_t compact_above(const float* score, int64_t n, float bar, Scored* buf) {
  int64_t m = 0, i = 0;
#if SHAMN_ISA_SIMD == 2
  // (score, id) pairs of lanes 0-7 and 8-15 as 64-bit elements, in order.
  const __m512i lo_pairs = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_pairs = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 vbar = _mm512_set1_ps(bar);
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16, ids = _mm512_add_epi32(ids, _mm512_set1_epi32(16))) {
    const __m512 s = _mm512_loadu_ps(score + i);
    const __mmask16 keep = _mm512_cmp_ps_mask(s, vbar, _CMP_GT_OQ);
    if (keep == 0) continue;
    const __m512i si = _mm512_castps_si512(s);
    const auto lo = static_cast<__mmask8>(keep & 0xFF), hi = static_cast<__mmask8>(keep >> 8);
    _mm512_mask_compressstoreu_epi64(buf + m, lo, _mm512_permutex2var_epi32(si, lo_pairs, ids));
    m += __builtin_popcount(lo);
    _mm512_mask_compressstoreu_epi64(buf + m, hi, _mm512_permutex2var_epi32(si, hi_pairs, ids));
    m += __builtin_popcount(hi);
  }
#endif
  for (; i < n; ++i) {
    buf[m] = {score[i], static_cast<int32_t>(i)};
    m += score[i] > bar;
  }
  return m;
}

}  // namespace
SHAMN_ISA_END

namespace shamn::product_key_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::rank_select, &::shamn::SHAMN_ISA_NS::compact_above};
}  // namespace shamn::product_key_isa
