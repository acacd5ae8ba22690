// The packed float GEMM, compiled once per SIMD level (core/isa.h); gemm() in
// core/gemm.cpp picks the level's copy for products of more than a few rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/bf16.h"
#include "core/ceil_div.h"
#include "core/chunk_fold.h"
#include "core/gemm_isa.h"
#include "core/parallel.h"
#include "core/product_precision.h"
#include "core/scratch.h"
#include "core/simd.h"

// GotoBLAS/BLIS-style single-precision GEMM.
//
// Loop nest (C row-major, vectors run along N):
//   jc: N in NC columns   B panel [KC, NC] packed once per (jc, pc), shared by threads
//   pc: K in KC           sequential: every C element sums its K blocks in this order
//   ir: MR rows of C      parallel; each unit packs its A micro-panel [MR, KC] just
//                         before use, so it sits in L1 for the whole jr sweep
//   jr: NR columns        B micro-panels [KC, NR] stream from L2/L3
//   micro-kernel: C[MR, NR] = alpha * A[MR, KC] * B[KC, NR] + beta' * C
// There is no MC block: with the A micro-panel resident in L1 and the B panel read
// sequentially, an L2-sized A block bought nothing in measurements.
// Threads split M (and N when M is short). Products with few tiles of C and a long K
// split K instead (gemm_split_k), with the same sums added in the same order: each
// element of C is produced by one kernel call per KC block, added in a fixed order,
// so results are bit-identical for any thread count.

SHAMN_ISA_BEGIN
namespace {

// Register tile MR x NR and cache blocks, chosen by measurement on Zen4 (2 cores,
// 32 KiB L1d and 1 MiB L2 per core; experiments/matmul.md). 8x32 keeps C in 16 of the
// 32 zmm registers. Per call it is as fast as 14x32, 12x32 or 6x64 (the FMA pipe, not
// the loads, is the limit), but it cuts the model's M (512, 2048, 4096) into an even
// number of panels, which keeps both threads busy to the end. KC = 512 makes every
// K <= 512 product a single pass over C (C is stored once, never re-read); the A
// micro-panel [8, 512] is 16 KiB and stays in L1 while B micro-panels stream past it
// from L2/L3.
#if SHAMN_ISA_SIMD == 2
constexpr int MR = 8;
constexpr int NR = 32;
#elif SHAMN_ISA_SIMD == 1
constexpr int MR = 6;  // 12 ymm accumulators + 2 for B + 1 broadcast = 15 of 16
constexpr int NR = 16;
#else
constexpr int MR = 4;  // 8 accumulator registers even with 128-bit SSE2 (16 registers)
constexpr int NR = 8;
#endif
constexpr int NV = NR / simd::kVec;  // vectors per row of the C tile
constexpr int64_t KC = 512;
constexpr int64_t kMinKInPlace = 64;
constexpr int64_t NC = 1024 / NR * NR;  // B panel [KC, NC] = 2 MiB: shared via L3

// Also split B's columns between threads when M has fewer micro-panels than this per
// thread and they do not divide evenly (otherwise one thread would finish last by a
// whole panel).
constexpr int64_t kBalancePanels = 16;
// Most A micro-panels per scheduling unit: big enough to amortise task overhead, small
// enough for TBB to rebalance when a core is busy with something else.
constexpr int64_t kUnitGrain = 4;

// Fewer multiply-adds than this: single-threaded.
constexpr int64_t kParallelWork = int64_t{1} << 21;

// Packed panels live in per-thread scratch slots (core/scratch.h).
thread_local ScratchSlot tls_apack;
thread_local ScratchSlot tls_bpack;
thread_local ScratchSlot tls_apanels;  // all of A's micro-panels of a K block, shared

// Slack after each packed buffer, so that a stray full-vector access at a panel's end
// can never leave the allocation.
constexpr size_t kPackPad = 64;

// ---------------------------------------------------------------------------------
// Packing. Both packers turn any transpose case into the one layout the kernel
// reads, so a single micro-kernel serves all four cases. Two of the cases are plain
// row copies; the other two are transposes of a [rows, kc] slab.

#if SHAMN_ISA_SIMD == 2

// dst[k * stride + r] = src[r * ld + k] for k < kc and r < lanes (<= 16); source rows
// at or beyond `rows` read as zero.
void pack_transposed(const float* src, int64_t ld, int rows, int64_t kc, float* dst, int stride, int lanes) {
  const __mmask16 store_mask = static_cast<__mmask16>((1u << lanes) - 1u);
  __m512 r[16];
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int kn = static_cast<int>(std::min<int64_t>(16, kc - k0));
    const __mmask16 load_mask = static_cast<__mmask16>((1u << kn) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = i < rows ? _mm512_maskz_loadu_ps(load_mask, src + i * ld + k0) : _mm512_setzero_ps();
    simd::transpose_16x16(r);
    float* d = dst + k0 * stride;
    if (kn == 16) {
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) _mm512_mask_storeu_ps(d + k * stride, store_mask, r[k]);
    } else {
      for (int k = 0; k < kn; ++k) _mm512_mask_storeu_ps(d + k * stride, store_mask, r[k]);
    }
  }
}

// [rows, kc] slab of a row-major matrix -> kc groups of `width` floats (width = MR or NR).
void pack_slab_transposed(const float* src, int64_t ld, int rows, int64_t kc, float* dst, int width) {
  for (int r0 = 0; r0 < width; r0 += 16) {
    const int lanes = std::min(16, width - r0);
    const int valid = std::clamp(rows - r0, 0, lanes);
    pack_transposed(src + r0 * ld, ld, valid, kc, dst + r0, width, lanes);
  }
}

#else

void pack_slab_transposed(const float* src, int64_t ld, int rows, int64_t kc, float* dst, int width) {
  // k outer: the writes stay sequential and the `rows` read streams are few.
  for (int64_t k = 0; k < kc; ++k) {
    float* d = dst + k * width;
    int r = 0;
    for (; r < rows; ++r) d[r] = src[r * ld + k];
    for (; r < width; ++r) d[r] = 0.0f;
  }
}

#endif

// [kc, cols] block of a row-major matrix -> kc groups of `width` floats, zero-padded.
template <int W>
void pack_slab_copy(const float* src, int64_t ld, int cols, int64_t kc, float* dst) {
  if (cols == W) {
    for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * W, src + k * ld, sizeof(float) * W);
    return;
  }
  for (int64_t k = 0; k < kc; ++k) {
    int j = 0;
    for (; j < cols; ++j) dst[k * W + j] = src[k * ld + j];
    for (; j < W; ++j) dst[k * W + j] = 0.0f;
  }
}

// A micro-panel: dst[k * MR + i] = op(A)[i0 + i, k0 + k]; rows >= mr are zero, so the
// kernel never needs a row-count branch inside its K loop.
void pack_a_panel(Trans ta, const float* A, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc,
                  float* dst) {
  if (ta == Trans::yes) {
    pack_slab_copy<MR>(A + k0 * lda + i0, lda, mr, kc, dst);  // A stored [K, M]
  } else {
    pack_slab_transposed(A + i0 * lda + k0, lda, mr, kc, dst, MR);
  }
}

// B micro-panel: dst[k * NR + j] = op(B)[k0 + k, j0 + j]; columns >= nr are zero.
void pack_b_panel(Trans tb, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int nr,
                  float* dst) {
  if (tb == Trans::no) {
    pack_slab_copy<NR>(B + k0 * ldb + j0, ldb, nr, kc, dst);
  } else {
    pack_slab_transposed(B + j0 * ldb + k0, ldb, nr, kc, dst, NR);  // B stored [N, K]
  }
}

// ---------------------------------------------------------------------------------
// Micro-kernel:
//   A micro-panel: [MR, kc] packed column-major (MR floats per k), 64-byte aligned
//   B micro-panel: [kc, NR] packed row-major (NR floats per k), 64-byte aligned
//   C tile: [mr, nr] row-major at c with stride ldc, mr <= MR, nr <= NR
//   C = alpha * A*B + beta * C; beta == 0 never reads C.
// C sits in MR x NV registers (AVX-512: 8 x 2 zmm; AVX2: 6 x 2 ymm). Each C element
// is one FMA chain over k = 0..kc-1, so its value does not depend on the tile shape,
// on where the tile sits or on which thread runs it: every level gives the same bits.

// C + alpha * acc is one explicit FMA: left as a product and a sum, GCC fused
// it in some copies of the kernel and not in others (levels, A packed or read
// in place), and their bits differed.
inline simd::Vec combine(simd::Vec acc, const float* p, float alpha, float beta) {
  if (beta == 1.0f)
    return alpha == 1.0f ? simd::vadd(simd::vloadu(p), acc)
                         : simd::vfma(simd::vsplat(alpha), acc, simd::vloadu(p));
  const simd::Vec r = alpha == 1.0f ? acc : simd::vmul(simd::vsplat(alpha), acc);
  if (beta == 0.0f) return r;
  return simd::vfma(simd::vsplat(beta), simd::vloadu(p), r);
}

using Tile = simd::Vec[MR][NV];

// The pair kernels' prologue and epilogue: micro_kernel's, which keeps its own
// copy (through these helpers the f32 products ran 2-4% slower, bench_matmul).
// Zeroes the accumulators and pulls the C tile toward L1: its rows are ldc apart,
// so no hardware prefetcher predicts them, and a miss at the end of the K loop
// would stall the whole tile.
[[gnu::always_inline]] inline void start_tile(Tile& acc, const float* c, int64_t ldc, int mr) {
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = simd::vzero();
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * ldc + j, 0, 3);
}

// C = alpha * acc + beta * C over the tile's mr x nr elements (beta == 0 never
// reads C).
[[gnu::always_inline]] inline void finish_tile(const Tile& acc, float* __restrict c, int64_t ldc, float alpha,
                                               float beta, int mr, int nr) {
  using simd::kVec;
  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + i * ldc + v * kVec;
        simd::vstoreu(p, combine(acc[i][v], p, alpha, beta));
      }
    return;
  }
  // Edge tile: spill to a buffer and finish element by element, with the arithmetic
  // of combine(), so edge and interior elements round alike.
  alignas(64) float tile[MR][NR];
  // Fully unrolled so acc is only ever indexed by constants and stays in registers
  // (a runtime index here makes GCC keep all of acc in memory, in the K loop too).
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) simd::vstoreu(&tile[i][v * kVec], acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float& out = c[i * ldc + j];
      if (beta == 1.0f) {
        out = alpha == 1.0f ? out + tile[i][j] : std::fma(alpha, tile[i][j], out);
        continue;
      }
      float r = alpha == 1.0f ? tile[i][j] : alpha * tile[i][j];
      if (beta != 0.0f) r = std::fma(beta, out, r);
      out = r;
    }
}

// ARows: A read in place, row i of the tile at a + i * lda (rows >= mr repeat
// row mr - 1, whose sums the edge path drops); else the packed micro-panel.
template <bool ARows>
[[gnu::always_inline]] inline void micro_kernel_impl(int64_t kc, const float* __restrict a, int64_t lda,
                                                     const float* __restrict b, float* __restrict c,
                                                     int64_t ldc, float alpha, float beta, int mr, int nr) {
  using simd::kVec;
  using simd::Vec;
  Vec acc[MR][NV];
  const float* arow[MR];
  if constexpr (ARows)
    for (int i = 0; i < MR; ++i) arow[i] = a + std::min(i, mr - 1) * lda;
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = simd::vzero();

  // Pull the C tile toward L1 now: its rows are ldc apart, so no hardware prefetcher
  // predicts them, and a miss at the end of the K loop would stall the whole tile.
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * ldc + j, 0, 3);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    Vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = simd::vload(b + v * kVec);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const Vec ai = ARows ? simd::vbroadcast(arow[i] + k) : simd::vbroadcast(a + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::vfma(ai, bv[v], acc[i][v]);
    }
    if constexpr (!ARows) a += MR;
    b += NR;
  }

  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + i * ldc + v * kVec;
        simd::vstoreu(p, combine(acc[i][v], p, alpha, beta));
      }
    return;
  }
  // Edge tile: spill to a buffer and finish element by element, with the arithmetic
  // of combine(), so edge and interior elements round alike.
  alignas(64) float tile[MR][NR];
  // Fully unrolled so acc is only ever indexed by constants and stays in registers
  // (a runtime index here makes GCC keep all of acc in memory, in the K loop too).
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) simd::vstoreu(&tile[i][v * kVec], acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float& out = c[i * ldc + j];
      if (beta == 1.0f) {
        out = alpha == 1.0f ? out + tile[i][j] : std::fma(alpha, tile[i][j], out);
        continue;
      }
      float r = alpha == 1.0f ? tile[i][j] : alpha * tile[i][j];
      if (beta != 0.0f) r = std::fma(beta, out, r);
      out = r;
    }
}

void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, float alpha, float beta, int mr, int nr) {
  micro_kernel_impl<false>(kc, a, 0, b, c, ldc, alpha, beta, mr, nr);
}

void micro_kernel_rows(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b,
                       float* __restrict c, int64_t ldc, float alpha, float beta, int mr, int nr) {
  micro_kernel_impl<true>(kc, a, lda, b, c, ldc, alpha, beta, mr, nr);
}

// The bf16 products (train.precision = "bf16") on panels of bf16 pairs
// (pair_panel; `pairs` rows): each C element's chain takes, per pair, the high
// product (k = 2p + 1) and then the low one, as vdpbf16ps adds a pair. Here in
// f32 FMAs at every level; below on vdpbf16ps where the CPU has AVX512_BF16,
// with the same bits (core/kernels/block_sparse_simd.h says more).
void micro_kernel_pairs(int64_t pairs, const float* __restrict a, const float* __restrict b,
                        float* __restrict c, int64_t ldc, float alpha, float beta, int mr, int nr) {
  using simd::kVec;
  using simd::Vec;
  Tile acc;
  start_tile(acc, c, ldc, mr);
  for (int64_t k = 0; k < pairs; ++k) {
    Vec high[NV], low[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const Vec bv = simd::vload(b + v * kVec);
      high[v] = simd::vpair_high(bv);
      low[v] = simd::vpair_low(bv);
    }
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const Vec ai = simd::vbroadcast(a + i);
      const Vec ah = simd::vpair_high(ai), al = simd::vpair_low(ai);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::vfma(al, low[v], simd::vfma(ah, high[v], acc[i][v]));
    }
    a += MR;
    b += NR;
  }
  finish_tile(acc, c, ldc, alpha, beta, mr, nr);
}

#if SHAMN_ISA_SIMD == 2
__attribute__((target("avx512bf16"))) void micro_kernel_pairs_native(int64_t pairs, const float* __restrict a,
                                                                     const float* __restrict b,
                                                                     float* __restrict c, int64_t ldc,
                                                                     float alpha, float beta, int mr,
                                                                     int nr) {
  Tile acc;
  start_tile(acc, c, ldc, mr);
#pragma GCC unroll 2
  for (int64_t k = 0; k < pairs; ++k) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_ps(b + v * 16);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
    a += MR;
    b += NR;
  }
  finish_tile(acc, c, ldc, alpha, beta, mr, nr);
}
#endif

// bf16 operands: a packed panel of kc rows of W floats made, in place while it
// is still in L1/L2, (kc + 1) / 2 rows of bf16 pairs: row p = bf16_pair(row
// 2p + 1, row 2p), rounded, a missing last odd row zero. Row p is written after
// rows 2p and 2p + 1 are read.
template <int W>
void pair_panel(float* p, int64_t kc) {
  for (int64_t k = 0; k < kc; k += 2) {
    float low[W], high[W];
    std::memcpy(low, p + k * W, sizeof low);
    if (k + 1 < kc) {
      std::memcpy(high, p + (k + 1) * W, sizeof high);
    } else {
      std::fill_n(high, W, 0.0f);
    }
    float* out = p + k / 2 * W;
    for (int i = 0; i < W; ++i) out[i] = bf16_pair(round_to_bf16(high[i]), round_to_bf16(low[i]));
  }
}

// The tile of a product: f32, or bf16 pairs (on vdpbf16ps where `native`).
void product_tile(bool bf16, bool native, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                  float alpha, float beta, int mr, int nr) {
  if (!bf16) return micro_kernel(kc, a, b, c, ldc, alpha, beta, mr, nr);
#if SHAMN_ISA_SIMD == 2
  if (native) return micro_kernel_pairs_native((kc + 1) / 2, a, b, c, ldc, alpha, beta, mr, nr);
#endif
  (void)native;
  micro_kernel_pairs((kc + 1) / 2, a, b, c, ldc, alpha, beta, mr, nr);
}

// Products with few tiles of C against a long K, a weight gradient above all
// (C [16, 512] summed over 49,152 tokens): the loop below would run two parallel
// loops per K block over a handful of tiles each. Here the K blocks are the
// parallel work (core/chunk_fold.h): block c's partial is op(A) op(B) over its K
// slice, exactly the sums the loop below scales by alpha and adds into C for it,
// and the partials are added into C in block order, beta applied with the first:
// the same bits.
constexpr int64_t kSplitMaxC = int64_t{1} << 18;  // floats of C: 1 MiB per partial

// Split when C has few row panels for the threads, or when K has blocks enough to
// keep every thread busy (measured on 2 threads: the memory query's gradient, C
// [256, 512] over 49,152 tokens, 1.08x faster split; C [512, 512] over 4,096 the same).
bool split_k(int64_t M, int64_t N, int64_t K, int threads) {
  if (threads <= 1 || in_serial_scope() || K <= KC || M * N > kSplitMaxC) return false;
  return ceil_div(M, MR) < 4 * threads || ceil_div(K, KC) >= 4 * threads;
}

void gemm_split_k(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool bf16) {
  const bool native = bf16 && bf16_dot_native();
  const int64_t nc_max = std::min(ceil_div(N, NR) * NR, NC);
  const int64_t m_panels = ceil_div(M, MR);
  const auto block_product = [&](int64_t block, float* out) {  // out [M, N], dense
    const int64_t pc = block * KC;
    const int64_t kc = std::min(KC, K - pc);
    ScratchLease bpack(tls_bpack, static_cast<size_t>(kc * nc_max) + kPackPad);
    ScratchLease apack(tls_apack, static_cast<size_t>(MR * kc) + kPackPad);
    float* bp = bpack.get();
    float* ap = apack.get();
    for (int64_t jc = 0; jc < N; jc += NC) {
      const int64_t nc = std::min(NC, N - jc);
      const int64_t n_panels = ceil_div(nc, NR);
      for (int64_t q = 0; q < n_panels; ++q) {
        const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
        pack_b_panel(tb, B, ldb, pc, kc, jc + q * NR, nr, bp + q * NR * kc);
        if (bf16) pair_panel<NR>(bp + q * NR * kc, kc);
      }
      for (int64_t p = 0; p < m_panels; ++p) {
        const int mr = static_cast<int>(std::min<int64_t>(MR, M - p * MR));
        pack_a_panel(ta, A, lda, p * MR, mr, pc, kc, ap);
        if (bf16) pair_panel<MR>(ap, kc);
        for (int64_t q = 0; q < n_panels; ++q) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
          product_tile(bf16, native, kc, ap, bp + q * NR * kc, out + p * MR * N + jc + q * NR, N, 1.0f, 0.0f,
                       mr, nr);
        }
      }
    }
  };
  // As combine() and the edge tiles: C + alpha * r (one FMA) after the first
  // block, beta's rule with it.
  const auto add_block = [&](int64_t block, const float* in, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* __restrict c = C + i * ldc;
      const float* __restrict r = in + i * N;
      if (block > 0 || beta == 1.0f) {
        if (alpha == 1.0f) {
          for (int64_t j = 0; j < N; ++j) c[j] = c[j] + r[j];
        } else {
          for (int64_t j = 0; j < N; ++j) c[j] = std::fma(alpha, r[j], c[j]);
        }
      } else if (beta == 0.0f) {
        for (int64_t j = 0; j < N; ++j) c[j] = alpha == 1.0f ? r[j] : alpha * r[j];
      } else {
        for (int64_t j = 0; j < N; ++j) c[j] = std::fma(beta, c[j], alpha == 1.0f ? r[j] : alpha * r[j]);
      }
    }
  };
  fold_chunks_in_order<float>(ceil_div(K, KC), M, N, block_product, add_block);
}

}  // namespace

void gemm_packed(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                 ProductPrecision precision) {
  const bool bf16 = precision == ProductPrecision::bf16;
  const bool native = bf16 && bf16_dot_native();
  // Small products run on the calling thread: waking a TBB worker costs about as much
  // as the whole product below ~128^3 (measured: no 2-thread speedup up to 192^3).
  const bool serial = M * N * K < kParallelWork;
  const int threads = serial ? 1 : num_threads();
  if (split_k(M, N, K, threads))
    return gemm_split_k(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
  const int64_t kc_max = std::min(K, KC);
  const int64_t nc_max = std::min(ceil_div(N, NR) * NR, NC);
  ScratchLease bpack(tls_bpack, static_cast<size_t>(kc_max * nc_max) + kPackPad);
  float* bp = bpack.get();
  const int64_t m_panels = ceil_div(M, MR);
  // A stored row-major is read in place by the kernels (same sums, same order):
  // 4-14% faster on one thread for K >= 512 (experiments/matmul.md), and no
  // packing pass. Below kMinKInPlace the packed copy stays: there the strided
  // row reads cost more than the copy (bwd dx of a router, K = 4..20).
  const bool a_in_place = !bf16 && ta == Trans::no && K >= kMinKInPlace;

  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    const int64_t n_panels = ceil_div(nc, NR);
    // Work unit = one A micro-panel against one column group of the B panel. Groups
    // exist only to balance threads when M has few panels (or a remainder that would
    // leave a thread idle); each group re-packs the A panels it uses.
    int64_t n_groups = 1;
    if (threads > 1 && m_panels % threads != 0 && m_panels < kBalancePanels * threads)
      n_groups = std::min<int64_t>(n_panels, threads);
    const int64_t group_panels = ceil_div(n_panels, n_groups);
    n_groups = ceil_div(n_panels, group_panels);
    const int64_t units = n_groups * m_panels;
    const int64_t grain =
        serial ? units : std::max<int64_t>(1, std::min<int64_t>(kUnitGrain, units / (4 * threads)));
    const int64_t pack_grain = serial ? n_panels : 4;
    // A packed (stored [K, M], or bf16) and used by several groups: each group
    // would pack it again, a strided read of kc rows for one short kernel call
    // (dtable [1,600, 512] at 16 threads: 16 groups of 1 panel). Packed once per
    // K block beside B instead, and read by every group.
    const bool a_shared = !a_in_place && n_groups > 1;
    std::optional<ScratchLease> apanels;
    if (a_shared) apanels.emplace(tls_apanels, static_cast<size_t>(m_panels * MR * kc_max) + kPackPad);
    float* aps = a_shared ? apanels->get() : nullptr;

    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const float beta_k = pc == 0 ? beta : 1.0f;

      // Items [0, n_panels) pack B's micro-panels, [n_panels, + m_panels) A's.
      const int64_t pack_items = n_panels + (a_shared ? m_panels : 0);
      parallel_for(0, pack_items, pack_grain, [&](int64_t lo, int64_t hi) {
        for (int64_t q = lo; q < hi; ++q) {
          if (q >= n_panels) {
            const int64_t p = q - n_panels;
            const int mr = static_cast<int>(std::min<int64_t>(MR, M - p * MR));
            pack_a_panel(ta, A, lda, p * MR, mr, pc, kc, aps + p * MR * kc);
            if (bf16) pair_panel<MR>(aps + p * MR * kc, kc);
            continue;
          }
          const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
          pack_b_panel(tb, B, ldb, pc, kc, jc + q * NR, nr, bp + q * NR * kc);
          if (bf16) pair_panel<NR>(bp + q * NR * kc, kc);
        }
      });

      // Units are numbered group-major, so a contiguous range of them (what one thread
      // runs) touches one slice of the B panel: each core keeps its slice in its L2.
      parallel_for(0, units, grain, [&](int64_t lo, int64_t hi) {
        ScratchLease apack(tls_apack, static_cast<size_t>(MR * kc) + kPackPad);
        float* ap = apack.get();
        for (int64_t u = lo; u < hi; ++u) {
          const int64_t g = u / m_panels;
          const int64_t p = u % m_panels;
          const int64_t q0 = g * group_panels;
          const int64_t q1 = std::min(n_panels, q0 + group_panels);
          const int mr = static_cast<int>(std::min<int64_t>(MR, M - p * MR));
          float* crow = C + p * MR * ldc + jc;
          if (a_in_place) {
            const float* arows = A + p * MR * lda + pc;
            for (int64_t q = q0; q < q1; ++q) {
              const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
              micro_kernel_rows(kc, arows, lda, bp + q * NR * kc, crow + q * NR, ldc, alpha, beta_k, mr, nr);
            }
            continue;
          }
          // Packed right before use, the A micro-panel is still in L1 for the kernels.
          const float* a = a_shared ? aps + p * MR * kc : ap;
          if (!a_shared) {
            pack_a_panel(ta, A, lda, p * MR, mr, pc, kc, ap);
            if (bf16) pair_panel<MR>(ap, kc);
          }
          for (int64_t q = q0; q < q1; ++q) {
            const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
            product_tile(bf16, native, kc, a, bp + q * NR * kc, crow + q * NR, ldc, alpha, beta_k, mr, nr);
          }
        }
      });
    }
  }
}

SHAMN_ISA_END

namespace shamn::gemm_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::gemm_packed};
}  // namespace shamn::gemm_isa
