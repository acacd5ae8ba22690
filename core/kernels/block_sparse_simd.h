#pragma once
// Internal to the block-sparse kernels (block_sparse_isa.cpp): the register-tile
// micro-kernel and the packing primitives, for the SIMD level of the including source
// (core/isa.h). Not a public API.
//
// One micro-kernel serves forward, grad input and grad values. It computes a tile
//   C[mr, NR] (=|+=) sum over segments s, k < len of A_s[k, 0:MR] (outer) B[k, 0:NR]
// where A is packed k-major (MR contiguous floats per k, a_step floats apart) and the
// segments are k ranges of it found at a_base + seg[s] * seg_stride, and B is packed
// k-major (NR contiguous floats per k, b_step floats apart), its k running on across
// segments. A block-sparse
// product is such a sum over the active blocks of one block row (forward) or one
// block column (grad input). Each C element is one FMA chain in segment-then-k
// order, so its value does not depend on which thread computes the tile.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/bf16.h"
#include "core/kernels/activation_simd.h"
#include "core/simd.h"

SHAMN_ISA_PUSH
namespace shamn::bsr {
inline namespace SHAMN_ISA_NS {

struct TileShape {
  int mr;  // rows of C per tile (rows of the A panel)
  int nv;  // vectors per C row: NR = nv * kVec columns
};

using vfloat = simd::Vec;
using simd::kVec;
using simd::vadd;
using simd::vbroadcast;
using simd::vfma;
using simd::vloadu;
using simd::vstoreu;
using simd::vzero;

#if SHAMN_ISA_SIMD == 2
// Token tiles (forward, grad input): 14x32 keeps 28 accumulators live, the most the
// 32 registers allow with one B row and a broadcast; with 16-wide blocks a 28x16
// tile keeps the same FMA-to-load ratio. Grad-values tiles must divide the block.
inline constexpr TileShape kTokenWide{14, 2};
inline constexpr TileShape kTokenNarrow{28, 1};
inline constexpr TileShape kGradWide{8, 2};
inline constexpr TileShape kGradNarrow{16, 1};
#elif SHAMN_ISA_SIMD == 1
// 16 registers: 6x16 (12 accumulators) for tokens, 4x16 for grad values.
inline constexpr TileShape kTokenWide{6, 2};
inline constexpr TileShape kTokenNarrow{6, 2};
inline constexpr TileShape kGradWide{4, 2};
inline constexpr TileShape kGradNarrow{4, 2};
#else
inline constexpr TileShape kTokenWide{4, 2};
inline constexpr TileShape kTokenNarrow{4, 2};
inline constexpr TileShape kGradWide{4, 2};
inline constexpr TileShape kGradNarrow{4, 2};
#endif

// A tile's accumulators start from bias[0:NR] (or zero) ...
template <int MR, int NV>
[[gnu::always_inline]] inline void init_tile(vfloat (&acc)[MR][NV], const float* bias) {
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const vfloat init = bias ? vloadu(bias + v * kVec) : vzero();
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) acc[i][v] = init;
  }
}

// ... and go to the first mr rows of C, added to what C holds when accumulating.
template <int MR, int NV>
[[gnu::always_inline]] inline void store_tile(const vfloat (&acc)[MR][NV], float* c, int64_t ldc,
                                              bool accumulate, int mr) {
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + i * ldc + v * kVec;
      vstoreu(p, accumulate ? vadd(vloadu(p), acc[i][v]) : acc[i][v]);
    }
  }
}

// C[0:mr, 0:NR] = R + C (both row stride ldc): a residual added to a finished
// tile while it is in L1, element by element as a separate add would.
template <int NV>
[[gnu::always_inline]] inline void add_to_tile(float* c, const float* r, int64_t ldc, int mr) {
  for (int i = 0; i < mr; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + i * ldc + v * kVec;
      vstoreu(p, vadd(vloadu(r + i * ldc + v * kVec), vloadu(p)));
    }
}

// One k of a chain: acc[i][:] += A[i, k] * B[k, 0:NR], A[i, k] at a_at(i).
template <int MR, int NV, class AAt>
[[gnu::always_inline]] inline void fma_k(vfloat (&acc)[MR][NV], const float* __restrict b, const AAt& a_at) {
  vfloat bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = vloadu(b + v * kVec);
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    const vfloat ai = vbroadcast(a_at(i));
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = vfma(ai, bv[v], acc[i][v]);
  }
}

// C[0:mr, 0:NR] at c (row stride ldc) = (accumulate ? C : 0) + (bias + chain), the
// chain (see the file comment) starting from bias[0:NR] when given, else from zero.
template <int MR, int NV>
void tile_kernel(int64_t nseg, int64_t len, const float* a_base, const int32_t* seg, int64_t seg_stride,
                 int64_t a_step, const float* __restrict b, int64_t b_step, float* c, int64_t ldc,
                 const float* bias, bool accumulate, int mr) {
  vfloat acc[MR][NV];
  init_tile<MR, NV>(acc, bias);
  for (int64_t s = 0; s < nseg; ++s) {
    const float* __restrict a = a_base + (seg ? seg[s] * seg_stride : 0);
#pragma GCC unroll 4
    for (int64_t k = 0; k < len; ++k) {
      fma_k<MR, NV>(acc, b, [a](int i) { return a + i; });
      a += a_step;
      b += b_step;
    }
  }
  store_tile<MR, NV>(acc, c, ldc, accumulate, mr);
}

// tile_kernel with A read where it lies: row i of the tile starts at rows[i]
// (rows at and past mr repeat row mr - 1, whose sums store_tile drops), segment
// s is its columns seg[s] * seg_stride onwards, and the chain reads A[i, k] at
// rows[i] + seg[s] * seg_stride + k. The same FMAs in the same order as on a
// packed copy of those rows: the same bits.
template <int MR, int NV>
void tile_kernel_rows(int64_t nseg, int64_t len, const float* const* rows, const int32_t* seg,
                      int64_t seg_stride, const float* __restrict b, int64_t b_step, float* c, int64_t ldc,
                      const float* bias, bool accumulate, int mr) {
  vfloat acc[MR][NV];
  init_tile<MR, NV>(acc, bias);
  for (int64_t s = 0; s < nseg; ++s) {
    const int64_t col = seg[s] * seg_stride;
    const float* a[MR];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) a[i] = rows[i] + col;
#pragma GCC unroll 4
    for (int64_t k = 0; k < len; ++k) {
      fma_k<MR, NV>(acc, b, [&a, k](int i) { return a[i] + k; });
      b += b_step;
    }
  }
  store_tile<MR, NV>(acc, c, ldc, accumulate, mr);
}

// The bf16 products (train.precision = "bf16") run the same tiles on panels of
// bf16 pairs: each packed row holds k = 2p + 1 in a slot's high half and 2p in
// its low half (core/bf16.h: bf16_pair), `pairs` rows per segment. Each C
// element's chain takes, pair by pair, the high product and then the low one,
// each product exact and each add rounded: what vdpbf16ps does to a lane
// (tile_kernel_pairs_native, where the CPU has AVX512_BF16), here in f32 FMAs
// on the unpacked halves, so every kernel level gives the same bits. The one
// exception is denormals, which vdpbf16ps reads as zero and flushes.
template <int MR, int NV>
void tile_kernel_pairs(int64_t nseg, int64_t pairs, const float* a_base, const int32_t* seg,
                       int64_t seg_stride, int64_t a_step, const float* __restrict b, int64_t b_step,
                       float* c, int64_t ldc, const float* bias, bool accumulate, int mr) {
  vfloat acc[MR][NV];
  init_tile<MR, NV>(acc, bias);
  for (int64_t s = 0; s < nseg; ++s) {
    const float* __restrict a = a_base + (seg ? seg[s] * seg_stride : 0);
    for (int64_t k = 0; k < pairs; ++k) {
      vfloat high[NV], low[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const vfloat bv = vloadu(b + v * kVec);
        high[v] = simd::vpair_high(bv);
        low[v] = simd::vpair_low(bv);
      }
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i) {
        const vfloat ah = vbroadcast(a + i);
        const vfloat al = simd::vpair_low(ah), ahigh = simd::vpair_high(ah);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = vfma(al, low[v], vfma(ahigh, high[v], acc[i][v]));
      }
      a += a_step;
      b += b_step;
    }
  }
  store_tile<MR, NV>(acc, c, ldc, accumulate, mr);
}

#if SHAMN_ISA_SIMD == 2
// tile_kernel_pairs on the CPU's bf16 dot product: one vdpbf16ps per pair row,
// twice the products of an f32 FMA. Call only where the CPU has AVX512_BF16.
template <int MR, int NV>
__attribute__((target("avx512bf16"))) void tile_kernel_pairs_native(int64_t nseg, int64_t pairs,
                                                                    const float* a_base, const int32_t* seg,
                                                                    int64_t seg_stride, int64_t a_step,
                                                                    const float* __restrict b, int64_t b_step,
                                                                    float* c, int64_t ldc, const float* bias,
                                                                    bool accumulate, int mr) {
  vfloat acc[MR][NV];
  init_tile<MR, NV>(acc, bias);
  for (int64_t s = 0; s < nseg; ++s) {
    const float* __restrict a = a_base + (seg ? seg[s] * seg_stride : 0);
#pragma GCC unroll 2
    for (int64_t k = 0; k < pairs; ++k) {
      __m512bh bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i) {
        const __m512bh ai = (__m512bh)_mm512_set1_ps(a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
      }
      a += a_step;
      b += b_step;
    }
  }
  store_tile<MR, NV>(acc, c, ldc, accumulate, mr);
}
#endif

// Spreads prefetches of a byte range over the calls of step(), so that the next
// tile's activations stream in from memory while the current tile computes.
class PrefetchStream {
 public:
  PrefetchStream() = default;
  PrefetchStream(const void* begin, const void* end, int64_t steps, bool for_write)
      : p_(static_cast<const char*>(begin)), end_(static_cast<const char*>(end)), write_(for_write) {
    const int64_t lines = (end_ - p_ + 63) / 64;
    per_step_ = steps > 0 ? (lines + steps - 1) / steps : lines;
  }
  void step() {
    for (int64_t l = 0; l < per_step_ && p_ < end_; ++l, p_ += 64) {
      if (write_) {
        __builtin_prefetch(p_, 1, 2);
      } else {
        __builtin_prefetch(p_, 0, 2);
      }
    }
  }

 private:
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  int64_t per_step_ = 0;
  bool write_ = false;
};

// PrefetchStream over rows of x named by an index: rows[0..count) of width
// floats, x + rows[t] * width, line after line.
class GatheredPrefetch {
 public:
  GatheredPrefetch() = default;
  GatheredPrefetch(const float* x, int64_t width, const int32_t* rows, int64_t count, int64_t steps)
      : x_(x), rows_(rows), width_(width), row_lines_((width * 4 + 63) / 64), lines_(count * row_lines_) {
    per_step_ = steps > 0 ? (lines_ + steps - 1) / steps : lines_;
  }
  void step() {
    for (int64_t l = 0; l < per_step_ && next_ < lines_; ++l, ++next_) {
      const int64_t t = next_ / row_lines_, line = next_ % row_lines_;
      __builtin_prefetch(x_ + rows_[t] * width_ + line * 16, 0, 2);
    }
  }

 private:
  const float* x_ = nullptr;
  const int32_t* rows_ = nullptr;
  int64_t width_ = 0, row_lines_ = 0, lines_ = 0, per_step_ = 0, next_ = 0;
};

// ---------------------------------------------------------------------------------
// Packing: dst[k * width + i] = src[i * ld + k] for k < cols and i < width, rows at
// or beyond `rows` read as zero (so padded tile rows hold harmless zeros). With
// Pairs (train.precision = "bf16"), it stores rounded bf16 pairs instead:
// dst[(k / 2) * width + i] = bf16_pair(src[i * ld + k + 1], src[i * ld + k]),
// the operands rounded as they are packed, no extra pass.

#if SHAMN_ISA_SIMD == 2

// With rows found by row(i) (a pointer to row i's first column), each read as
// act of it (activations before rounding, as a separate pass would give them).
template <bool Pairs = false, class RowAt>
inline void pack_transposed_rows(const RowAt& row, int rows, int64_t cols, float* dst, int width,
                                 InputActivation act = InputActivation::none) {
  __m512 r[16];
  for (int i0 = 0; i0 < width; i0 += 16) {
    const int lanes = std::min(16, width - i0);
    const int valid = std::clamp(rows - i0, 0, lanes);
    const __mmask16 store_mask = static_cast<__mmask16>((1u << lanes) - 1u);
    for (int64_t k0 = 0; k0 < cols; k0 += 16) {
      const int kn = static_cast<int>(std::min<int64_t>(16, cols - k0));
      const __mmask16 load_mask = static_cast<__mmask16>((1u << kn) - 1u);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i < valid ? _mm512_maskz_loadu_ps(load_mask, row(i0 + i) + k0) : _mm512_setzero_ps();
      if (act != InputActivation::none) {  // the zero rows stay zero: act(0) = 0
        simd::F f[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) f[i] = static_cast<simd::F>(r[i]);
        act16::apply(f, act);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) r[i] = static_cast<__m512>(f[i]);
      }
      if constexpr (Pairs)
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) r[i] = simd::vround_bf16(r[i]);
      simd::transpose_16x16(r);
      if constexpr (Pairs) {
        float* d = dst + k0 / 2 * width + i0;  // k0 is even
        for (int k = 0; k < kn; k += 2)
          _mm512_mask_storeu_ps(d + k / 2 * width, store_mask,
                                simd::vpair(k + 1 < kn ? r[k + 1] : _mm512_setzero_ps(), r[k]));
      } else {
        float* d = dst + k0 * width + i0;
        for (int k = 0; k < kn; ++k) _mm512_mask_storeu_ps(d + k * width, store_mask, r[k]);
      }
    }
  }
}

#else

template <bool Pairs = false, class RowAt>
inline void pack_transposed_rows(const RowAt& row, int rows, int64_t cols, float* dst, int width,
                                 InputActivation act = InputActivation::none) {
  for (int64_t k0 = 0; k0 < cols; k0 += 16) {
    const int64_t kn = std::min<int64_t>(16, cols - k0);
    for (int i = 0; i < width; ++i) {
      float v[16] = {};
      if (i < rows) {
        std::memcpy(v, row(i) + k0, sizeof(float) * static_cast<size_t>(kn));
        if (act != InputActivation::none) {
          simd::F f[1] = {simd::load(v)};
          act16::apply(f, act);
          simd::store(v, f[0]);
        }
      }
      for (int64_t k = 0; k < kn; k += Pairs ? 2 : 1) {
        if constexpr (Pairs) {
          dst[(k0 + k) / 2 * width + i] =
              bf16_pair(k + 1 < kn ? round_to_bf16(v[k + 1]) : 0.0f, round_to_bf16(v[k]));
        } else {
          dst[(k0 + k) * width + i] = v[k];
        }
      }
    }
  }
}

#endif

// dst[k * width + i] = src[i * ld + k] (see above), rows ld floats apart.
template <bool Pairs = false>
inline void pack_transposed(const float* src, int64_t ld, int rows, int64_t cols, float* dst, int width) {
  pack_transposed_rows<Pairs>([src, ld](int i) { return src + i * ld; }, rows, cols, dst, width);
}

// dst[k * W + i] = src[k * ld + i] for k < rows: W-float row slices made contiguous.
template <int W>
inline void pack_rows(const float* src, int64_t ld, int64_t rows, float* dst) {
  for (int64_t k = 0; k < rows; ++k) std::memcpy(dst + k * W, src + k * ld, sizeof(float) * W);
}

// dst[p * W + i] = bf16_pair(src[(2p + 1) * ld + i], src[2p * ld + i]), rounded,
// for p < (rows + 1) / 2 (a missing last odd row reads as zero): pack_rows for
// the bf16 pair kernels.
template <int W>
inline void pack_row_pairs(const float* src, int64_t ld, int64_t rows, float* dst) {
  static_assert(W % kVec == 0);
  for (int64_t k = 0; k < rows; k += 2)
    for (int v = 0; v < W; v += kVec) {
      const vfloat low = simd::vround_bf16(vloadu(src + k * ld + v));
      const vfloat high = k + 1 < rows ? simd::vround_bf16(vloadu(src + (k + 1) * ld + v)) : vzero();
      vstoreu(dst + k / 2 * W + v, simd::vpair(high, low));
    }
}

// dst[0:n] = bf16_pair(high[0:n], low[0:n]) rounded, n a multiple of 16; a null
// high reads as zeros.
inline void copy_pairs16(float* dst, const float* high, const float* low, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
#pragma GCC unroll 4
    for (int v = 0; v < 16 / kVec; ++v) {
      const vfloat l = simd::vround_bf16(vloadu(low + i + v * kVec));
      const vfloat h = high ? simd::vround_bf16(vloadu(high + i + v * kVec)) : vzero();
      vstoreu(dst + i + v * kVec, simd::vpair(h, l));
    }
}

// dst[0:n] = src[0:n] for n a multiple of 16: inline vector moves, where a memcpy call
// per short block slice would cost more than the copy.
inline void copy_floats16(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
#pragma GCC unroll 4
    for (int v = 0; v < 16 / kVec; ++v) vstoreu(dst + i + v * kVec, vloadu(src + i + v * kVec));
}

// copy_floats16 and copy_pairs16 of act(src) (act none: the plain copies).
inline void copy_floats16(float* dst, const float* src, int64_t n, InputActivation act) {
  if (act == InputActivation::none) return copy_floats16(dst, src, n);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    simd::F f[2] = {simd::load(src + i), simd::load(src + i + 16)};
    act16::apply(f, act);
    simd::store(dst + i, f[0]);
    simd::store(dst + i + 16, f[1]);
  }
  if (i < n) {
    simd::F f[1] = {simd::load(src + i)};
    act16::apply(f, act);
    simd::store(dst + i, f[0]);
  }
}

inline void copy_pairs16(float* dst, const float* high, const float* low, int64_t n, InputActivation act) {
  if (act == InputActivation::none) return copy_pairs16(dst, high, low, n);
  alignas(64) float h[16], l[16];
  for (int64_t i = 0; i < n; i += 16) {
    simd::F f[2] = {simd::load(low + i), high ? simd::load(high + i) : simd::F{}};
    act16::apply(f, act);
    simd::store(l, f[0]);
    simd::store(h, f[1]);
    copy_pairs16(dst + i, high ? h : nullptr, l, 16);
  }
}

}  // namespace SHAMN_ISA_NS
}  // namespace shamn::bsr
SHAMN_ISA_POP
