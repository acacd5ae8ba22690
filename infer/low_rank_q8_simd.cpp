// The AVX2 and AVX-512 VNNI paths of low_rank_add_q8 (infer/low_rank_q8.h):
// 8 rows in the lanes of one register, each group of 4 values of x broadcast
// to all of them. The float part is the scalar path's, per lane.
#include <algorithm>

#include "infer/low_rank_q8.h"
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

constexpr int64_t kC = LowRankQ8::kChunk, kG = LowRankQ8::kGroup;

// AVX2: |x| unsigned and w with x's sign into maddubs, as the block kernels do
// (q8 values are never -128, so no pair of products saturates).
struct Avx2Groups {
  SHAMN_TARGET_AVX2 static __m256i start(int32_t) { return _mm256_setzero_si256(); }
  // xv: a group of 4 values of x in every lane.
  SHAMN_TARGET_AVX2 static __m256i add(__m256i isum, const int8_t* w, __m256i xv) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));
    return _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// AVX-512 VNNI: vpdpbusd takes w + 128 (flipped at load) unsigned and x signed;
// the sums start at -128 * sum(x) to take the offset back off.
struct Avx512Groups {
  SHAMN_TARGET_AVX512 static __m256i start(int32_t xsum) { return _mm256_set1_epi32(-128 * xsum); }
  SHAMN_TARGET_AVX512 static __m256i add(__m256i isum, const int8_t* w, __m256i xv) {
    const __m256i wv = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)),
                                        _mm256_set1_epi8(static_cast<char>(0x80)));
    return _mm256_dpbusd_epi32(isum, wv, xv);
  }
};

SHAMN_TARGET_AVX2 inline __m256i broadcast_group(const int8_t* q) { return _mm256_set1_epi32(load_group(q)); }

// One chunk of 8 rows: y8 [8] += c * (W x) of those rows. xsum: x's block sums.
template <class Groups>
SHAMN_TARGET_AVX2 inline void chunk_add(const LowRankQ8& w, int64_t ch, const BlockQ8* x, const int32_t* xsum,
                                        float c, float* y8) {
  const int64_t blocks = w.blocks();
  const int8_t* chunk = w.packed.data() + ch * w.groups * kC * kG;
  const float* d = w.d.data() + ch * blocks * kC;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0, g0 = 0; j < blocks; g0 += w.groups_in_block(j), ++j) {
    // Two sums halve the chain of dependent adds (integers: the order is free).
    __m256i isum[2] = {Groups::start(xsum[j]), _mm256_setzero_si256()};
    for (int64_t g = 0; g < w.groups_in_block(j); ++g)
      isum[g % 2] = Groups::add(isum[g % 2], chunk + (g0 + g) * kC * kG, broadcast_group(x[j].q + g * kG));
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(x[j].d), _mm256_loadu_ps(d + j * kC));
    acc = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(_mm256_add_epi32(isum[0], isum[1])), acc);
  }
  _mm256_storeu_ps(y8, _mm256_fmadd_ps(_mm256_set1_ps(c), acc, _mm256_loadu_ps(y8)));
}

// W's chunks [ch0, ch1) for one row of x when W has a single block of columns
// (B: rank <= 32): x's groups are broadcast once for every chunk. The float
// part is chunk_add's with one block, bit for bit.
template <class Groups>
SHAMN_TARGET_AVX2 inline void one_block_chunks(const LowRankQ8& w, const BlockQ8& x, int32_t xsum, float c,
                                               float* y, int64_t ch0, int64_t ch1) {
  const int64_t groups = w.groups;  // <= 8
  __m256i xv[kQuantBlock / kG];
  for (int64_t g = 0; g < groups; ++g) xv[g] = broadcast_group(x.q + g * kG);
  const __m256i start = Groups::start(xsum);
  const __m256 xd = _mm256_set1_ps(x.d), cv = _mm256_set1_ps(c);
  for (int64_t ch = ch0; ch < ch1; ++ch) {
    const int8_t* chunk = w.packed.data() + ch * groups * kC * kG;
    __m256i isum[2] = {start, _mm256_setzero_si256()};
    for (int64_t g = 0; g < groups; ++g) isum[g % 2] = Groups::add(isum[g % 2], chunk + g * kC * kG, xv[g]);
    const __m256 scale = _mm256_mul_ps(xd, _mm256_loadu_ps(w.d.data() + ch * kC));
    const __m256 acc =
        _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(_mm256_add_epi32(isum[0], isum[1])), _mm256_setzero_ps());
    _mm256_storeu_ps(y + ch * kC, _mm256_fmadd_ps(cv, acc, _mm256_loadu_ps(y + ch * kC)));
  }
}

template <class Groups>
SHAMN_TARGET_AVX2 inline void low_rank_add(const LowRankQ8& w, const LowRankInput& in, float c, float* y,
                                           int64_t y_stride, int64_t r0, int64_t r1) {
  const int64_t full = r1 / kC;
  if (w.blocks() == 1) {
    for (int64_t t = 0; t < in.n; ++t) {
      one_block_chunks<Groups>(w, in.x[t * in.stride], in.sums[t * in.stride], c, y + in.y_row(t) * y_stride,
                               r0 / kC, full);
    }
  } else {
    // Chunks outer: a chunk's weights stay in L1 for every row of x.
    for (int64_t ch = r0 / kC; ch < full; ++ch)
      for (int64_t t = 0; t < in.n; ++t) {
        chunk_add<Groups>(w, ch, in.x + t * in.stride, in.sums + t * in.stride, c,
                          y + in.y_row(t) * y_stride + ch * kC);
      }
  }
  if (full * kC < r1) {  // the last rows of W, through a copy
    const int64_t rest = r1 - full * kC;
    for (int64_t t = 0; t < in.n; ++t) {
      float tail[kC] = {};
      float* yt = y + in.y_row(t) * y_stride + full * kC;
      std::copy_n(yt, rest, tail);
      chunk_add<Groups>(w, full, in.x + t * in.stride, in.sums + t * in.stride, c, tail);
      std::copy_n(tail, rest, yt);
    }
  }
}

// AVX-512, W with one block of columns (B: rank <= 32), many rows of x:
// 16 outputs a register (two chunks side by side), kHalves registers of
// outputs a tile, the tile's weights and scales loaded once for every row of
// x. Each lane is one_block_chunks' float part bit for bit. Returns the chunk
// it stopped at: the tiles cover [ch0, that) of [ch0, ch1).
template <int kGroups, int kHalves>
SHAMN_TARGET_AVX512 inline int64_t one_block_tiles(const LowRankQ8& w, const LowRankInput& in, float c,
                                                   float* y, int64_t y_stride, int64_t ch0, int64_t ch1) {
  constexpr int64_t kTileChunks = 2 * kHalves;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512 cv = _mm512_set1_ps(c), zero = _mm512_setzero_ps();
  int64_t ch = ch0;
  for (; ch + kTileChunks <= ch1; ch += kTileChunks) {
    __m512i wv[kHalves][kGroups];
    __m512 dv[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      const int8_t* lo = w.packed.data() + (ch + 2 * h) * kGroups * kC * kG;
      for (int g = 0; g < kGroups; ++g) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + g * kC * kG));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + (kGroups + g) * kC * kG));
        wv[h][g] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), flip);
      }
      dv[h] = _mm512_loadu_ps(w.d.data() + (ch + 2 * h) * kC);  // chunks' scales lie side by side
    }
    for (int64_t t = 0; t < in.n; ++t) {
      const BlockQ8& x = in.x[t * in.stride];
      __m512i xv[kGroups];
      for (int g = 0; g < kGroups; ++g) xv[g] = _mm512_set1_epi32(load_group(x.q + g * kG));
      const __m512i start = _mm512_set1_epi32(-128 * in.sums[t * in.stride]);
      const __m512 xd = _mm512_set1_ps(x.d);
      float* yt = y + in.y_row(t) * y_stride + ch * kC;
      for (int h = 0; h < kHalves; ++h) {
        __m512i isum = start;
        for (int g = 0; g < kGroups; ++g) isum = _mm512_dpbusd_epi32(isum, wv[h][g], xv[g]);
        const __m512 acc = _mm512_fmadd_ps(_mm512_mul_ps(xd, dv[h]), _mm512_cvtepi32_ps(isum), zero);
        _mm512_storeu_ps(yt + 16 * h, _mm512_fmadd_ps(cv, acc, _mm512_loadu_ps(yt + 16 * h)));
      }
    }
  }
  return ch;
}

// Tiles of 4 chunks, then of 2 (a dense product's spans are 16-row tiles).
template <int kGroups>
SHAMN_TARGET_AVX512 inline int64_t one_block_tiles_4_2(const LowRankQ8& w, const LowRankInput& in, float c,
                                                       float* y, int64_t y_stride, int64_t ch0, int64_t ch1) {
  const int64_t ch = one_block_tiles<kGroups, 2>(w, in, c, y, y_stride, ch0, ch1);
  return one_block_tiles<kGroups, 1>(w, in, c, y, y_stride, ch, ch1);
}

// The tiles for W's groups (1 to 8), or ch0 when there are more.
SHAMN_TARGET_AVX512 inline int64_t one_block_tiles(const LowRankQ8& w, const LowRankInput& in, float c,
                                                   float* y, int64_t y_stride, int64_t ch0, int64_t ch1) {
  switch (w.groups) {
    case 1:
      return one_block_tiles_4_2<1>(w, in, c, y, y_stride, ch0, ch1);
    case 2:
      return one_block_tiles_4_2<2>(w, in, c, y, y_stride, ch0, ch1);
    case 3:
      return one_block_tiles_4_2<3>(w, in, c, y, y_stride, ch0, ch1);
    case 4:
      return one_block_tiles_4_2<4>(w, in, c, y, y_stride, ch0, ch1);
    case 5:
      return one_block_tiles<5, 1>(w, in, c, y, y_stride, ch0, ch1);
    case 6:
      return one_block_tiles<6, 1>(w, in, c, y, y_stride, ch0, ch1);
    case 7:
      return one_block_tiles<7, 1>(w, in, c, y, y_stride, ch0, ch1);
    case 8:
      return one_block_tiles<8, 1>(w, in, c, y, y_stride, ch0, ch1);
    default:
      return ch0;
  }
}

}  // namespace

// flatten: the templates above carry AVX2's target, and GCC inlines a function
// only into one with at least its target, so the AVX-512 adds would stay calls.
SHAMN_TARGET_AVX2 __attribute__((flatten)) void low_rank_add_q8_avx2(const LowRankQ8& w,
                                                                     const LowRankInput& in, float c,
                                                                     float* y, int64_t y_stride, int64_t r0,
                                                                     int64_t r1) {
  low_rank_add<Avx2Groups>(w, in, c, y, y_stride, r0, r1);
}

SHAMN_TARGET_AVX512 __attribute__((flatten)) void low_rank_add_q8_avx512(const LowRankQ8& w,
                                                                         const LowRankInput& in, float c,
                                                                         float* y, int64_t y_stride,
                                                                         int64_t r0, int64_t r1) {
  if (w.blocks() == 1) r0 = kC * one_block_tiles(w, in, c, y, y_stride, r0 / kC, r1 / kC);
  if (r0 < r1)
    low_rank_add<Avx512Groups>(w, in, c, y, y_stride, r0, r1);  // (its row loop costs even when empty)
}

// Integer sums: every path gives the same values.
SHAMN_TARGET_AVX2 void q8_block_sums_avx2(const BlockQ8* x, int64_t blocks, int32_t* sums) {
  for (int64_t j = 0; j < blocks; ++j) sums[j] = block_value_sum(x[j]);
}

}  // namespace shamn::quant_detail
