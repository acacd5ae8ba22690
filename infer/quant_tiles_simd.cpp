// The AVX2 and AVX-512 VNNI paths of dot_tiles (infer/quant_tiles.h). Each
// tile gives a vector of 16 row sums directly; the float part follows the
// canonical order of infer/quant_dot.h with rows in vector lanes: block j is
// fma'd into accumulator j % 8, and the eight accumulators are summed left to
// right, so the results are bitwise those of the scalar path.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// x's block sums, which turn the unsigned products below back into signed ones.
class ValueSums {
 public:
  SHAMN_TARGET_AVX2 ValueSums(const BlockQ8* x, int64_t bpr) {
    if (bpr > kStack) heap_.resize(static_cast<size_t>(bpr));
    sums_ = bpr > kStack ? heap_.data() : stack_;
    for (int64_t j = 0; j < bpr; ++j) sums_[j] = block_value_sum(x[j]);
  }
  int32_t operator[](int64_t j) const { return sums_[j]; }

 private:
  static constexpr int64_t kStack = 64;
  int32_t stack_[kStack];
  std::vector<int32_t> heap_;
  int32_t* sums_;
};

// ---- AVX-512 VNNI: one zmm holds a tile's 16 rows. vpdpbusd wants unsigned
// bytes on one side: Q8 weights are flipped to w + 128 and 128 * sum(x) is
// subtracted; Q4 nibbles are already w + 8 and 8 * sum(x) is subtracted.

// Two accumulators halve the chain of dependent vpdpbusd (integer sums: the
// order is free).
SHAMN_TARGET_AVX512 inline __m512i tile_isums(const TileQ8& w, const BlockQ8& x, int32_t xsum) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[2] = {_mm512_set1_epi32(-128 * xsum), _mm512_setzero_si512()};
  for (int g = 0; g < kQuantBlock / 4; ++g)
    acc[g % 2] = _mm512_dpbusd_epi32(acc[g % 2], _mm512_xor_si512(_mm512_loadu_si512(w.q[g]), flip),
                                     _mm512_set1_epi32(load_group(x.q + 4 * g)));
  return _mm512_add_epi32(acc[0], acc[1]);
}

SHAMN_TARGET_AVX512 inline __m512i tile_isums(const TileQ4& w, const BlockQ8& x, int32_t xsum) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512i acc[2] = {_mm512_set1_epi32(-8 * xsum), _mm512_setzero_si512()};
  for (int g = 0; g < kQuantBlock / 8; ++g) {
    const __m512i v = _mm512_loadu_si512(w.q[g]);
    acc[0] =
        _mm512_dpbusd_epi32(acc[0], _mm512_and_si512(v, low), _mm512_set1_epi32(load_group(x.q + 4 * g)));
    acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_and_si512(_mm512_srli_epi16(v, 4), low),
                                 _mm512_set1_epi32(load_group(x.q + 16 + 4 * g)));
  }
  return _mm512_add_epi32(acc[0], acc[1]);
}

template <class Tile>
SHAMN_TARGET_AVX512 void dot_tiles_avx512(const Tile* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                          float* y) {
  const ValueSums xsum(x, bpr);
  for (int64_t t = 0; t * kTileRows < rows; ++t) {
    const Tile* wt = w + t * bpr;
    __m512 lanes[kLanes];
    for (auto& l : lanes) l = _mm512_setzero_ps();
    for (int64_t g = 0; g < bpr; g += kLanes) {
#pragma GCC unroll 8
      for (int k = 0; k < kLanes; ++k) {
        const int64_t j = g + k;
        if (j >= bpr) break;
        const __m512 scale = _mm512_mul_ps(_mm512_loadu_ps(wt[j].d), _mm512_set1_ps(x[j].d));
        lanes[k] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(tile_isums(wt[j], x[j], xsum[j])), lanes[k]);
      }
    }
    __m512 s = lanes[0];
    for (int k = 1; k < kLanes; ++k) s = _mm512_add_ps(s, lanes[k]);
    const int64_t n = std::min<int64_t>(kTileRows, rows - t * kTileRows);
    _mm512_mask_storeu_ps(y + t * kTileRows, static_cast<__mmask16>((1u << n) - 1), s);
  }
}

// ---- AVX-512 VNNI over many rows of x. A tile's weights sit in registers,
// ready for vpdpbusd, while a group of up to kGroup rows of x is multiplied by
// them; per row the integer sums and the float order are those of
// dot_tiles_avx512 above, so the results are bitwise equal.

// One TileQ8 as unsigned bytes (w + 128), one register per group of 4 values.
struct TileRegsQ8 {
  __m512i q[kQuantBlock / 4];
  SHAMN_TARGET_AVX512 explicit TileRegsQ8(const TileQ8& w) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int g = 0; g < kQuantBlock / 4; ++g) q[g] = _mm512_xor_si512(_mm512_loadu_si512(w.q[g]), flip);
  }
  SHAMN_TARGET_AVX512 __m512i isums(const BlockQ8& x, int32_t xsum) const {
    __m512i acc[2] = {_mm512_set1_epi32(-128 * xsum), _mm512_setzero_si512()};
    for (int g = 0; g < kQuantBlock / 4; ++g)
      acc[g % 2] = _mm512_dpbusd_epi32(acc[g % 2], q[g], _mm512_set1_epi32(load_group(x.q + 4 * g)));
    return _mm512_add_epi32(acc[0], acc[1]);
  }
};

// One TileQ4 as its low and high nibbles (w + 8).
struct TileRegsQ4 {
  __m512i lo[kQuantBlock / 8], hi[kQuantBlock / 8];
  SHAMN_TARGET_AVX512 explicit TileRegsQ4(const TileQ4& w) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < kQuantBlock / 8; ++g) {
      const __m512i v = _mm512_loadu_si512(w.q[g]);
      lo[g] = _mm512_and_si512(v, low);
      hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
  }
  SHAMN_TARGET_AVX512 __m512i isums(const BlockQ8& x, int32_t xsum) const {
    __m512i acc[2] = {_mm512_set1_epi32(-8 * xsum), _mm512_setzero_si512()};
    for (int g = 0; g < kQuantBlock / 8; ++g) {
      acc[0] = _mm512_dpbusd_epi32(acc[0], lo[g], _mm512_set1_epi32(load_group(x.q + 4 * g)));
      acc[1] = _mm512_dpbusd_epi32(acc[1], hi[g], _mm512_set1_epi32(load_group(x.q + 16 + 4 * g)));
    }
    return _mm512_add_epi32(acc[0], acc[1]);
  }
};

template <class Tile>
using TileRegs = std::conditional_t<std::is_same_v<Tile, TileQ8>, TileRegsQ8, TileRegsQ4>;

// Stores the n = popcount(mask) results of tile t through the epilogue.
SHAMN_TARGET_AVX512 inline void store_tile(float* y, __mmask16 mask, __m512 v, const TileEpilogue& e,
                                           int64_t t) {
  if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.bias + t * kTileRows));
  if (e.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
  _mm512_mask_storeu_ps(y, mask, v);
}

constexpr int kGroup = 4;

// G rows of x against every tile. xb: [G, bpr] block pointers, xs: [G, bpr]
// their value sums, y: [G] output rows. Blocks go lane by lane (j = k, k + 8,
// ...): lane k is finished before it is added to the sum, which is the
// canonical left-to-right sum of the eight lanes with far fewer live registers.
template <class Tile, int G>
SHAMN_TARGET_AVX512 void tiles_times_group_avx512(const Tile* w, int64_t rows, int64_t bpr,
                                                  const BlockQ8* const* xb, const int32_t* xs,
                                                  float* const* y, const TileEpilogue& e) {
  for (int64_t t = 0; t * kTileRows < rows; ++t) {
    const Tile* wt = w + t * bpr;
    __m512 sum[G];
    // Lanes past bpr stay zero: adding +0 once instead of once per empty lane
    // gives the same sum (x + 0 = x, and -0 + 0 = +0 either way).
    const int used = static_cast<int>(std::min<int64_t>(kLanes, bpr));
    for (int k = 0; k < used; ++k) {
      __m512 lane[G];
      for (int u = 0; u < G; ++u) lane[u] = _mm512_setzero_ps();
      for (int64_t j = k; j < bpr; j += kLanes) {
        const TileRegs<Tile> regs(wt[j]);
        const __m512 wd = _mm512_loadu_ps(wt[j].d);
        for (int u = 0; u < G; ++u) {
          const BlockQ8& xj = *xb[u * bpr + j];
          const __m512 scale = _mm512_mul_ps(wd, _mm512_set1_ps(xj.d));
          lane[u] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(regs.isums(xj, xs[u * bpr + j])), lane[u]);
        }
      }
      for (int u = 0; u < G; ++u) sum[u] = k == 0 ? lane[u] : _mm512_add_ps(sum[u], lane[u]);
    }
    if (used < kLanes)
      for (int u = 0; u < G; ++u) sum[u] = _mm512_add_ps(sum[u], _mm512_setzero_ps());
    const int64_t n = std::min<int64_t>(kTileRows, rows - t * kTileRows);
    for (int u = 0; u < G; ++u)
      store_tile(y[u] + t * kTileRows, static_cast<__mmask16>((1u << n) - 1), sum[u], e, t);
  }
}

// How many tiles ahead the few-blocks kernel prefetches (below).
constexpr int kPrefetchAhead = 3;

// Rows of B <= 2 blocks (a block-sparse row block's active segments at 90%
// sparsity): a tile's B blocks fit in registers for every row of x, so they are
// loaded once per tile instead of once per group. Each block is its own lane,
// so per row the sum is lane 0 + lane 1 (+ 0 for the empty lanes): bitwise the
// general path's.
template <class Tile, int B, bool Accumulate, bool Gathered>
SHAMN_TARGET_AVX512 void tiles_few_blocks_avx512(const Tile* w, int64_t rows, const Q8Rows& x, float* y,
                                                 int64_t y_stride, const TileEpilogue& e) {
  static_assert(B >= 1 && B <= 2 && B < kLanes);
  // x's and e's fields in locals: read through the references, every store to
  // y made the compiler load them again (y might alias them), a dozen scalar
  // instructions per token next to its 8 B vpdpbusd.
  const BlockQ8* const xb = x.x;
  const int32_t* const tokens = x.rows;
  const int32_t* const sums = x.sums;
  const int64_t n = x.n, stride = x.stride;
  const int64_t col[2] = {x.index ? x.index[0] : 0, x.index ? x.index[B - 1] : B - 1};
  const float* const bias = e.bias;
  for (int64_t t = 0; t * kTileRows < rows; ++t) {
    const Tile* wt = w + t * B;
    const TileRegs<Tile> r0(wt[0]);
    const TileRegs<Tile> r1(wt[B - 1]);
    const __m512 wd[2] = {_mm512_loadu_ps(wt[0].d), _mm512_loadu_ps(wt[B - 1].d)};
    // The B tiles kPrefetchAhead tiles on (this call's later rows, or the next
    // calls': a matrix's row blocks lie one after another) load while this
    // one's tokens run. An expert's weights come from L3 once per pass of
    // tokens; one tile ahead left part of each load's latency exposed
    // (moe.up and moe.down 8-11% slower than three ahead, Zen 5).
    // (Through an integer: the address may lie past the matrix, where a pointer may not point.)
    const auto* next =
        reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(wt) + kPrefetchAhead * B * sizeof(Tile));
    for (size_t off = 0; off < B * sizeof(Tile); off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
    const int64_t nr = std::min<int64_t>(kTileRows, rows - t * kTileRows);
    const auto mask = static_cast<__mmask16>((1u << nr) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + t * kTileRows) : _mm512_setzero_ps();
    for (int64_t u = 0; u < n; ++u) {
      const int64_t base = (Gathered ? tokens[u] : u) * stride;
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < B; ++j) {
        const int64_t o = base + col[j];
        const BlockQ8& xj = xb[o];
        const int32_t xs = sums ? sums[o] : block_value_sum(xj);
        const __m512 scale = _mm512_mul_ps(wd[j], _mm512_set1_ps(xj.d));
        const __m512i isum = j == 0 ? r0.isums(xj, xs) : r1.isums(xj, xs);
        const __m512 lane = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), _mm512_setzero_ps());
        sum = j == 0 ? lane : _mm512_add_ps(sum, lane);
      }
      // The general path adds +0 for the empty lanes, and +0 for no bias: here
      // neither changes a bit, since a lane fma(scale, isum, +0) is never -0 and
      // so neither is their sum (x + 0 = x for every other x, NaN included).
      __m512 v = bias ? _mm512_add_ps(sum, b) : sum;
      float* yu = y + u * y_stride + t * kTileRows;
      if (Accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, yu), v);
      _mm512_mask_storeu_ps(yu, mask, v);
    }
  }
}

// Accumulating and gathered rows are compiled in, not tested per token: in the
// token loop the two tests, and the flag the compiler kept in a mask register,
// cost 2.5-4.7% of a prefill on Zen 5 (experiments/inference.md).
template <class Tile, int B>
SHAMN_TARGET_AVX512 void tiles_few_blocks_avx512(const Tile* w, int64_t rows, const Q8Rows& x, float* y,
                                                 int64_t y_stride, const TileEpilogue& e) {
  if (e.accumulate)
    return x.rows ? tiles_few_blocks_avx512<Tile, B, true, true>(w, rows, x, y, y_stride, e)
                  : tiles_few_blocks_avx512<Tile, B, true, false>(w, rows, x, y, y_stride, e);
  return x.rows ? tiles_few_blocks_avx512<Tile, B, false, true>(w, rows, x, y, y_stride, e)
                : tiles_few_blocks_avx512<Tile, B, false, false>(w, rows, x, y, y_stride, e);
}

template <class Tile>
SHAMN_TARGET_AVX512 void dot_tiles_batch_avx512(const Tile* w, int64_t rows, int64_t bpr, const Q8Rows& x,
                                                float* y, int64_t y_stride, const TileEpilogue& e) {
  if (bpr == 1) return tiles_few_blocks_avx512<Tile, 1>(w, rows, x, y, y_stride, e);
  if (bpr == 2) return tiles_few_blocks_avx512<Tile, 2>(w, rows, x, y, y_stride, e);
  // A decode step calls this for every row block of every matrix: short rows
  // keep their block pointers on the stack (a heap allocation per call cost a
  // fifth of a decoded token).
  constexpr int64_t kStackBlocks = 128;
  const BlockQ8* xb_stack[kGroup * kStackBlocks];
  int32_t xs_stack[kGroup * kStackBlocks];
  std::vector<const BlockQ8*> xb_heap(bpr > kStackBlocks ? static_cast<size_t>(kGroup * bpr) : 0);
  std::vector<int32_t> xs_heap(xb_heap.size());
  const BlockQ8** xb = bpr > kStackBlocks ? xb_heap.data() : xb_stack;
  int32_t* xs = bpr > kStackBlocks ? xs_heap.data() : xs_stack;
  float* yg[kGroup];
  for (int64_t t0 = 0; t0 < x.n; t0 += kGroup) {
    const int g = static_cast<int>(std::min<int64_t>(kGroup, x.n - t0));
    for (int u = 0; u < g; ++u) {
      yg[u] = y + (t0 + u) * y_stride;
      for (int64_t j = 0; j < bpr; ++j) {
        const int64_t o = x.offset(t0 + u, j);
        xb[u * bpr + j] = x.x + o;
        xs[u * bpr + j] = x.sums ? x.sums[o] : block_value_sum(x.x[o]);
      }
    }
    switch (g) {
      case 4:
        tiles_times_group_avx512<Tile, 4>(w, rows, bpr, xb, xs, yg, e);
        break;
      case 3:
        tiles_times_group_avx512<Tile, 3>(w, rows, bpr, xb, xs, yg, e);
        break;
      case 2:
        tiles_times_group_avx512<Tile, 2>(w, rows, bpr, xb, xs, yg, e);
        break;
      default:
        tiles_times_group_avx512<Tile, 1>(w, rows, bpr, xb, xs, yg, e);
    }
  }
}

// ---- AVX2: a tile's 16 rows in two ymm halves of 8. Q8 uses the sign trick
// (|w| times x with w's sign; pairs of products stay within int16); Q4 nibbles
// are unsigned already and 8 * sum(x) is subtracted.

SHAMN_TARGET_AVX2 inline __m256i madd_bytes(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

SHAMN_TARGET_AVX2 inline void tile_isums(const TileQ8& w, const BlockQ8& x, int32_t, __m256i* acc) {
  acc[0] = acc[1] = _mm256_setzero_si256();
  for (int g = 0; g < kQuantBlock / 4; ++g) {
    const __m256i xb = _mm256_set1_epi32(load_group(x.q + 4 * g));
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q[g][8 * h]));
      acc[h] = _mm256_add_epi32(acc[h], madd_bytes(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xb, v)));
    }
  }
}

SHAMN_TARGET_AVX2 inline void tile_isums(const TileQ4& w, const BlockQ8& x, int32_t xsum, __m256i* acc) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  acc[0] = acc[1] = _mm256_set1_epi32(-8 * xsum);
  for (int g = 0; g < kQuantBlock / 8; ++g) {
    const __m256i xlo = _mm256_set1_epi32(load_group(x.q + 4 * g));
    const __m256i xhi = _mm256_set1_epi32(load_group(x.q + 16 + 4 * g));
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q[g][8 * h]));
      acc[h] = _mm256_add_epi32(acc[h], madd_bytes(_mm256_and_si256(v, low), xlo));
      acc[h] = _mm256_add_epi32(acc[h], madd_bytes(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), xhi));
    }
  }
}

template <class Tile>
SHAMN_TARGET_AVX2 void dot_tiles_avx2(const Tile* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  const ValueSums xsum(x, bpr);
  for (int64_t t = 0; t * kTileRows < rows; ++t) {
    const Tile* wt = w + t * bpr;
    __m256 lanes[kLanes][2];
    for (auto& l : lanes) l[0] = l[1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < bpr; ++j) {
      __m256i isum[2];
      tile_isums(wt[j], x[j], xsum[j], isum);
      const __m256 dx = _mm256_set1_ps(x[j].d);
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(wt[j].d + 8 * h), dx);
        lanes[j % kLanes][h] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[h]), lanes[j % kLanes][h]);
      }
    }
    float out[kTileRows];
    for (int h = 0; h < 2; ++h) {
      __m256 s = lanes[0][h];
      for (int k = 1; k < kLanes; ++k) s = _mm256_add_ps(s, lanes[k][h]);
      _mm256_storeu_ps(out + 8 * h, s);
    }
    const int64_t n = std::min<int64_t>(kTileRows, rows - t * kTileRows);
    std::memcpy(y + t * kTileRows, out, static_cast<size_t>(n) * sizeof(float));
  }
}

// Row i's 32 values of a TileQ8 in element order: 4 bytes from each of the 8 groups, 64 bytes apart.
SHAMN_TARGET_AVX2 inline __m256i tile_row_values(const TileQ8& t, int64_t i) {
  const __m256i groups = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.q[0][i]), groups, 4);
}

}  // namespace

SHAMN_TARGET_AVX2 void add_scaled_tile_q8_avx2(const TileQ8* tiles, int64_t bpr, int64_t i, float w,
                                               float* acc) {
  const __m256 vw = _mm256_set1_ps(w);
  for (int64_t j = 0; j < bpr; ++j) {
    const __m256i q = tile_row_values(tiles[j], i);
    const __m256 d = _mm256_set1_ps(tiles[j].d[i]);
    float* a = acc + j * kQuantBlock;
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    for (int k = 0; k < 4; ++k) {
      const __m128i bytes = k % 2 ? _mm_srli_si128(halves[k / 2], 8) : halves[k / 2];
      const __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
      _mm256_storeu_ps(a + 8 * k, _mm256_fmadd_ps(vw, v, _mm256_loadu_ps(a + 8 * k)));
    }
  }
}

SHAMN_TARGET_AVX512 void add_scaled_tile_q8_avx512(const TileQ8* tiles, int64_t bpr, int64_t i, float w,
                                                   float* acc) {
  const __m512 vw = _mm512_set1_ps(w);
  for (int64_t j = 0; j < bpr; ++j) {
    const __m256i q = tile_row_values(tiles[j], i);
    const __m512 d = _mm512_set1_ps(tiles[j].d[i]);
    float* a = acc + j * kQuantBlock;
    for (int k = 0; k < 2; ++k) {
      const __m128i bytes = k ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
      const __m512 v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)));
      _mm512_storeu_ps(a + 16 * k, _mm512_fmadd_ps(vw, v, _mm512_loadu_ps(a + 16 * k)));
    }
  }
}

SHAMN_TARGET_AVX512 void dot_tiles_batch_q8_avx512(const TileQ8* w, int64_t rows, int64_t bpr,
                                                   const Q8Rows& x, float* y, int64_t y_stride,
                                                   const TileEpilogue& e) {
  dot_tiles_batch_avx512(w, rows, bpr, x, y, y_stride, e);
}
SHAMN_TARGET_AVX512 void dot_tiles_batch_q4_avx512(const TileQ4* w, int64_t rows, int64_t bpr,
                                                   const Q8Rows& x, float* y, int64_t y_stride,
                                                   const TileEpilogue& e) {
  dot_tiles_batch_avx512(w, rows, bpr, x, y, y_stride, e);
}
void dot_tiles_batch_q8_avx2(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                             int64_t y_stride, const TileEpilogue& e) {
  dot_tiles_batch_by_row(dot_tiles_q8_avx2, w, rows, bpr, x, y, y_stride, e);
}
void dot_tiles_batch_q4_avx2(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                             int64_t y_stride, const TileEpilogue& e) {
  dot_tiles_batch_by_row(dot_tiles_q4_avx2, w, rows, bpr, x, y, y_stride, e);
}

SHAMN_TARGET_AVX512 void dot_tiles_q8_avx512(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                             float* y) {
  dot_tiles_avx512(w, rows, bpr, x, y);
}
SHAMN_TARGET_AVX512 void dot_tiles_q4_avx512(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                             float* y) {
  dot_tiles_avx512(w, rows, bpr, x, y);
}
SHAMN_TARGET_AVX2 void dot_tiles_q8_avx2(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                         float* y) {
  dot_tiles_avx2(w, rows, bpr, x, y);
}
SHAMN_TARGET_AVX2 void dot_tiles_q4_avx2(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x,
                                         float* y) {
  dot_tiles_avx2(w, rows, bpr, x, y);
}

}  // namespace shamn::quant_detail
