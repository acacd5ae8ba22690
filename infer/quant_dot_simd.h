#pragma once
// Internal to infer/: AVX2 helpers shared by the AVX2 and AVX-512 paths. Each
// carries its own target attribute so the file compiles without -march flags.
#include <cstdint>
#include <cstring>

#include "core/intrinsics.h"
#include "infer/quant_dot_paths.h"

#define SHAMN_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define SHAMN_TARGET_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace shamn::quant_detail {

// Eight vectors of 8 int32 partial sums (one vector per block) -> one vector
// of the 8 block totals, block k in lane k. Integer adds: order is free.
SHAMN_TARGET_AVX2 inline __m256i block_totals(const __m256i* v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  // Per 128-bit half: [b0 b1 b2 b3] (low half) and [b0 b1 b2 b3] (high half) sums.
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23);
  const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// 32 Q4 values of one block as signed bytes in element order (-8..7).
SHAMN_TARGET_AVX2 inline __m256i unpack_q4(const BlockQ4& w) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

SHAMN_TARGET_AVX2 inline __m256i load_q8(const BlockQ8& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.q));
}

// One group of 8 blocks starting at `first` into the lane accumulators.
template <class W>
SHAMN_TARGET_AVX2 inline __m256 add_group(__m256 lanes, const W* w, const BlockQ8* x, int64_t first,
                                          __m256i totals) {
  // Built in registers: eight scalar stores read back as one vector would stall
  // store forwarding. Each lane's product is the same float multiply as scalar code.
  const W* v = w + first;
  const BlockQ8* u = x + first;
  const __m256 dw = _mm256_set_ps(v[7].d, v[6].d, v[5].d, v[4].d, v[3].d, v[2].d, v[1].d, v[0].d);
  const __m256 dx = _mm256_set_ps(u[7].d, u[6].d, u[5].d, u[4].d, u[3].d, u[2].d, u[1].d, u[0].d);
  return _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(totals), lanes);
}

// 4 bytes of q as one int32 (a group of 4 values, for broadcasting).
SHAMN_TARGET_AVX2 inline int32_t load_group(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, sizeof(v));
  return v;
}

// The sum of a Q8 block's 32 values: sad sums unsigned bytes, so the values
// are shifted by 128 first and 32 * 128 taken back off.
SHAMN_TARGET_AVX2 inline int32_t block_value_sum(const BlockQ8& x) {
  const __m256i u = _mm256_xor_si256(load_q8(x), _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

SHAMN_TARGET_AVX2 inline int32_t hsum_epi32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1)));
}

// Lanes back to memory, then the blocks past the last full group of 8 one at a
// time (rows of 1..7 blocks, e.g. block-sparse rows, are all tail), then the
// canonical final sum. block_sum(w, x) -> int32 is the path's SIMD block total.
template <class W, class BlockSum>
SHAMN_TARGET_AVX2 inline float finish(__m256 lanes, const W* w, const BlockQ8* x, int64_t begin, int64_t end,
                                      BlockSum block_sum) {
  float l[kLanes];
  _mm256_storeu_ps(l, lanes);
  for (int64_t i = begin; i < end; ++i)
    l[i % kLanes] = std::fma(w[i].d * x[i].d, static_cast<float>(block_sum(w[i], x[i])), l[i % kLanes]);
  return sum_lanes(l);
}

// Rows of bpr < 8 blocks (block-sparse rows): every block is the first in its
// lane, so the canonical lane value is fma(dw * dx, total, 0) and the row sum
// is those values added in block order, plus the untouched +0 lanes (adding
// +0 once turns a -0 sum into +0, as the scalar path does). Eight rows are
// eight groups of bpr blocks, so each group of 8 (row, block) pairs shares one
// block_totals. rows must be a multiple of 8; returns rows.
template <class W, class Partial>
SHAMN_TARGET_AVX2 inline int64_t short_rows(const W* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y,
                                            Partial partial_dot) {
  float prod[kLanes * kLanes];
  for (int64_t r0 = 0; r0 < rows; r0 += kLanes) {
    const W* wr = w + r0 * bpr;
    __m256i partial[kLanes];
    float dw[kLanes], dx[kLanes];
    int k = 0;
    float* out = prod;
    for (int i = 0; i < kLanes; ++i)
      for (int64_t j = 0; j < bpr; ++j) {
        const W& wb = wr[i * bpr + j];
        partial[k] = partial_dot(wb, x[j]);
        dw[k] = wb.d;
        dx[k] = x[j].d;
        if (++k == kLanes) {
          const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(dw), _mm256_loadu_ps(dx));
          _mm256_storeu_ps(
              out, _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(block_totals(partial)), _mm256_setzero_ps()));
          out += kLanes;
          k = 0;
        }
      }
    for (int i = 0; i < kLanes; ++i) {
      float s = prod[i * bpr];
      for (int64_t j = 1; j < bpr; ++j) s += prod[i * bpr + j];
      y[r0 + i] = s + 0.0f;
    }
  }
  return rows;
}

// Both SIMD paths share this shape; `block(w, x)` -> __m256i is the path's
// eight int32 partial sums of one block pair (their total is the block's dot).
template <class W, class Block>
SHAMN_TARGET_AVX2 inline float dot_blocks(const W* w, const BlockQ8* x, int64_t blocks, Block block) {
  __m256 lanes = _mm256_setzero_ps();
  const int64_t full = blocks / kLanes * kLanes;
  for (int64_t g = 0; g < full; g += kLanes) {
    __m256i partial[kLanes];
    for (int k = 0; k < kLanes; ++k) partial[k] = block(w[g + k], x[g + k]);
    lanes = add_group(lanes, w, x, g, block_totals(partial));
  }
  return finish(lanes, w, x, full, blocks,
                [&](const W& wb, const BlockQ8& xb) SHAMN_TARGET_AVX2 { return hsum_epi32(block(wb, xb)); });
}

template <class W, class Block>
SHAMN_TARGET_AVX2 inline void dot_rows_blocks(const W* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                              float* y, Block block) {
  const int64_t r0 = bpr < kLanes ? short_rows(w, rows / kLanes * kLanes, bpr, x, y, block) : 0;
  for (int64_t r = r0; r < rows; ++r) y[r] = dot_blocks(w + r * bpr, x, bpr, block);
}

}  // namespace shamn::quant_detail
