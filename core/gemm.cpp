#include "core/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// GCC 12 warns falsely about _mm512_undefined_ps() inside its own intrinsics (GCC bug
// 105593); the warning is attributed to the header, so silence it there.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "core/aligned.h"
#include "core/check.h"
#include "core/kernels/vec16.h"
#include "core/parallel.h"
#include "core/scratch.h"

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
// Threads only ever split M (and N when M is short), never K, so each element of C is
// produced by one kernel call per KC block in a fixed order: bit-identical results for
// any thread count.

namespace shamn {
namespace {

// Register tile MR x NR and cache blocks, chosen by measurement on Zen4 (2 cores,
// 32 KiB L1d and 1 MiB L2 per core; experiments/matmul.md). 8x32 keeps C in 16 of the
// 32 zmm registers. Per call it is as fast as 14x32, 12x32 or 6x64 (the FMA pipe, not
// the loads, is the limit), but it cuts the model's M (512, 2048, 4096) into an even
// number of panels, which keeps both threads busy to the end. KC = 512 makes every
// K <= 512 product a single pass over C (C is stored once, never re-read); the A
// micro-panel [8, 512] is 16 KiB and stays in L1 while B micro-panels stream past it
// from L2/L3.
#if defined(__AVX512F__)
constexpr int MR = 8;
constexpr int NR = 32;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int MR = 6;  // 12 ymm accumulators + 2 for B + 1 broadcast = 15 of 16
constexpr int NR = 16;
#else
constexpr int MR = 4;  // 8 accumulator registers even with 128-bit SSE2 (16 registers)
constexpr int NR = 8;
#endif
constexpr int64_t KC = 512;
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

// Products with at most this many rows of op(A) skip packing: packing B costs about as
// much as multiplying a few rows by it directly (measured crossover: ~2 rows for B^T,
// where the direct path uses dot products, ~4 rows for B).
constexpr int64_t kDirectRowsBt = 2;
constexpr int64_t kDirectRowsB = 4;

// Packed panels live in per-thread scratch slots (core/scratch.h).
thread_local ScratchSlot tls_apack;
thread_local ScratchSlot tls_bpack;

// Slack after each packed buffer, so that a stray full-vector access at a panel's end
// can never leave the allocation.
constexpr size_t kPackPad = 64;

// ---------------------------------------------------------------------------------
// Packing. Both packers turn any transpose case into the one layout the kernel
// reads, so a single micro-kernel serves all four cases. Two of the cases are plain
// row copies; the other two are transposes of a [rows, kc] slab.

#if defined(__AVX512F__)

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
    vec16::transpose_16x16(r);
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
// Micro-kernels. All share one contract:
//   A micro-panel: [MR, kc] packed column-major (MR floats per k), 64-byte aligned
//   B micro-panel: [kc, NR] packed row-major (NR floats per k), 64-byte aligned
//   C tile: [mr, nr] row-major at c with stride ldc, mr <= MR, nr <= NR
//   C = alpha * A*B + beta * C; beta == 0 never reads C.
// Each C element is one FMA chain over k = 0..kc-1, so its value does not depend on
// where the tile sits or which thread runs it.

#if defined(__AVX512F__)

constexpr int NV = NR / 16;

inline __m512 combine(__m512 acc, const float* p, __mmask16 m, float alpha, float beta, bool full) {
  const __m512 r = alpha == 1.0f ? acc : _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
  if (beta == 0.0f) return r;
  const __m512 old = full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
  if (beta == 1.0f) return _mm512_add_ps(old, r);
  return _mm512_fmadd_ps(_mm512_set1_ps(beta), old, r);
}

// AVX-512: A panel [8, kc] (8 floats per k, broadcast one at a time), B panel [kc, 32]
// (two zmm per k), C tile [8, 32] in 16 zmm accumulators; edge tiles store through
// lane masks, so they round exactly like interior ones.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, float alpha, float beta, int mr, int nr) {
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();

  auto step = [&]() __attribute__((always_inline)) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + v * 16);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  };
  // Pull the C tile toward L1 now: its rows are ldc apart, so no hardware prefetcher
  // predicts them, and a miss at the end of the K loop would stall the whole tile.
  for (int i = 0; i < mr; ++i)
    for (int v = 0; v < NV; ++v)
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + v * 16), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) step();

  if (mr == MR && nr == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + i * ldc + v * 16;
        _mm512_storeu_ps(p, combine(acc[i][v], p, 0xFFFF, alpha, beta, true));
      }
    return;
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= mr) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int left = nr - v * 16;
      if (left <= 0) break;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
      float* p = c + i * ldc + v * 16;
      _mm512_mask_storeu_ps(p, m, combine(acc[i][v], p, m, alpha, beta, false));
    }
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

constexpr int NV = NR / 8;

// AVX2: A panel [6, kc], B panel [kc, 16] (two ymm per k), C tile [6, 16] in 12 ymm
// accumulators.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, float alpha, float beta, int mr, int nr) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();

  for (int i = 0; i < mr; ++i)  // see the AVX-512 kernel
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(b + v * 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }

  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vb = _mm256_set1_ps(beta);
  if (mr == MR && nr == NR) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* p = c + i * ldc + v * 8;
        __m256 r = alpha == 1.0f ? acc[i][v] : _mm256_mul_ps(va, acc[i][v]);
        if (beta == 1.0f) {
          r = _mm256_add_ps(_mm256_loadu_ps(p), r);
        } else if (beta != 0.0f) {
          r = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), r);
        }
        _mm256_storeu_ps(p, r);
      }
    return;
  }
  // Edge tile: spill to a buffer and finish element by element (same arithmetic as
  // the vector path, so edge and interior elements round alike).
  alignas(32) float tile[MR][NR];
  // Fully unrolled so acc is only ever indexed by constants and stays in registers
  // (a runtime index here makes GCC keep all of acc in memory, in the K loop too).
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm256_store_ps(&tile[i][v * 8], acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float r = alpha == 1.0f ? tile[i][j] : alpha * tile[i][j];
      float& out = c[i * ldc + j];
      if (beta == 1.0f) {
        r = out + r;
      } else if (beta != 0.0f) {
        r = std::fma(beta, out, r);
      }
      out = r;
    }
}

#else

// Portable: A panel [4, kc], B panel [kc, 8], C tile [4, 8] in a local array the
// compiler keeps in vector registers where it can.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, float alpha, float beta, int mr, int nr) {
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < MR; ++i) {
      const float ai = a[i];
      for (int j = 0; j < NR; ++j) acc[i][j] += ai * b[j];
    }
    a += MR;
    b += NR;
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float r = alpha == 1.0f ? acc[i][j] : alpha * acc[i][j];
      float& out = c[i * ldc + j];
      if (beta == 1.0f) {
        r = out + r;
      } else if (beta != 0.0f) {
        r = beta * out + r;
      }
      out = r;
    }
}

#endif

// ---------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row-at-a-time GEMM without packing: the float path for very short op(A) (GEMV-like,
// where packing B would cost more than the product) and the whole double path.
// Unit u computes C[i, j0:j0+kChunk] completely (all of K, in order), so splitting
// units between threads never changes a result.
constexpr int64_t kDirectChunk = 256;

// Sum of x[k] * y[k] in a fixed order: kLanes independent partial sums (a shape the
// compiler vectorizes without reassociating) combined pairwise at the end.
template <class T>
T dot(const T* __restrict x, const T* __restrict y, int64_t n) {
  constexpr int kLanes = 64 / sizeof(T) * 4;  // four vectors' worth
  T part[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += x[k + l] * y[k + l];
  for (int l = 0; k < n; ++k, ++l) part[l] += x[k] * y[k];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) part[l] += part[l + width];
  return part[0];
}

template <class T>
void gemm_direct(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t chunks = ceil_div(N, kDirectChunk);
  const int64_t unit_work = std::min(N, kDirectChunk) * K;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, unit_work));
  parallel_for(0, M * chunks, grain, [&](int64_t lo, int64_t hi) {
    alignas(64) T acc[kDirectChunk];
    std::vector<T> a_copy(ta == Trans::yes ? static_cast<size_t>(K) : 0);
    int64_t copied_row = -1;
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t i = u / chunks;
      const int64_t j0 = (u % chunks) * kDirectChunk;
      const int64_t jn = std::min(kDirectChunk, N - j0);
      const T* arow = A + i * lda;
      if (ta == Trans::yes) {  // op(A) row i is a strided column of A
        if (copied_row != i) {
          for (int64_t k = 0; k < K; ++k) a_copy[static_cast<size_t>(k)] = A[k * lda + i];
          copied_row = i;
        }
        arow = a_copy.data();
      }
      if (tb == Trans::yes) {  // op(B) column j is row j of B: dot products
        for (int64_t j = 0; j < jn; ++j) acc[j] = dot(arow, B + (j0 + j) * ldb, K);
      } else {  // rows of B scaled and accumulated
        std::fill(acc, acc + jn, T(0));
        for (int64_t k = 0; k < K; ++k) {
          const T a = arow[k];
          const T* __restrict brow = B + k * ldb + j0;
          for (int64_t j = 0; j < jn; ++j) acc[j] += a * brow[j];
        }
      }
      T* crow = C + i * ldc + j0;
      if (beta == T(0)) {
        for (int64_t j = 0; j < jn; ++j) crow[j] = alpha * acc[j];
      } else {
        for (int64_t j = 0; j < jn; ++j) crow[j] = alpha * acc[j] + beta * crow[j];
      }
    }
  });
}

template <class T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + N, T(0));
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

template <class T>
void check_args(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                int64_t ldb, const T* C, int64_t ldc) {
  SHAMN_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative dimension M=", M, " N=", N, " K=", K);
  const int64_t a_cols = ta == Trans::yes ? M : K;
  const int64_t b_cols = tb == Trans::yes ? K : N;
  SHAMN_CHECK(lda >= a_cols, "gemm: lda=", lda, " is smaller than the ", a_cols, " columns of stored A",
              ta == Trans::yes ? " (transposed)" : "");
  SHAMN_CHECK(ldb >= b_cols, "gemm: ldb=", ldb, " is smaller than the ", b_cols, " columns of stored B",
              tb == Trans::yes ? " (transposed)" : "");
  SHAMN_CHECK(ldc >= N, "gemm: ldc=", ldc, " is smaller than N=", N);
  SHAMN_CHECK(C != nullptr || M == 0 || N == 0, "gemm: C is null");
  SHAMN_CHECK((A != nullptr && B != nullptr) || M == 0 || N == 0 || K == 0, "gemm: A or B is null");
}

void gemm_packed(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t kc_max = std::min(K, KC);
  const int64_t nc_max = std::min(ceil_div(N, NR) * NR, NC);
  ScratchLease bpack(tls_bpack, static_cast<size_t>(kc_max * nc_max) + kPackPad);
  float* bp = bpack.get();

  // Small products run on the calling thread: waking a TBB worker costs about as much
  // as the whole product below ~128^3 (measured: no 2-thread speedup up to 192^3).
  const bool serial = M * N * K < kParallelWork;
  const int threads = serial ? 1 : num_threads();
  const int64_t m_panels = ceil_div(M, MR);

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

    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const float beta_k = pc == 0 ? beta : 1.0f;

      parallel_for(0, n_panels, pack_grain, [&](int64_t lo, int64_t hi) {
        for (int64_t q = lo; q < hi; ++q) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
          pack_b_panel(tb, B, ldb, pc, kc, jc + q * NR, nr, bp + q * NR * kc);
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
          // Packed right before use, the A micro-panel is still in L1 for the kernels.
          pack_a_panel(ta, A, lda, p * MR, mr, pc, kc, ap);
          float* crow = C + p * MR * ldc + jc;
          for (int64_t q = q0; q < q1; ++q) {
            const int nr = static_cast<int>(std::min<int64_t>(NR, nc - q * NR));
            micro_kernel(kc, ap, bp + q * NR * kc, crow + q * NR, ldc, alpha, beta_k, mr, nr);
          }
        }
      });
    }
  }
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (M <= (trans_b == Trans::yes ? kDirectRowsBt : kDirectRowsB)) {
    gemm_direct(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  gemm_direct(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace shamn
