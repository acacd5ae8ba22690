// The causal convolution's four-tap row, compiled once per SIMD level: the
// baseline build ran it 8 lanes wide, where it was 4% of a runtime prefill.
#include "core/kernels/causal_conv_isa.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/isa.h"

SHAMN_ISA_BEGIN
namespace {

void row4(float* __restrict out, const float* w, int64_t D, const float* __restrict x0,
          const float* __restrict x1, const float* __restrict x2, const float* __restrict x3) {
  const float *w1 = w + D, *w2 = w + 2 * D, *w3 = w + 3 * D;
  for (int64_t d = 0; d < D; ++d) {
    // Explicit fmas: left to the compiler, it may fuse w[d] * x0[d] instead.
    float acc = w[d] * x0[d];
    acc = std::fma(w1[d], x1[d], acc);
    acc = std::fma(w2[d], x2[d], acc);
    out[d] = std::fma(w3[d], x3[d], acc);
  }
}

// One row's terms of the kernel's gradient, W channels: a[i] += dc row g times
// the input i rows back (x0: the row's own input; rows D floats apart), taps
// within the sequence (t: the row's time).
template <int W>
inline void add_kernel_row(float (&a)[4][W], const float* __restrict g, const float* x0, int64_t t,
                           int64_t D) {
  constexpr int K = 4;
  if (t >= K - 1) {
#pragma GCC unroll 4
    for (int i = 0; i < K; ++i) {
      const float* __restrict x = x0 - i * D;
#pragma GCC unroll 64
      for (int d = 0; d < W; ++d) a[i][d] = std::fma(g[d], x[d], a[i][d]);
    }
    return;
  }
  for (int64_t i = 0; i <= t; ++i) {
    const float* __restrict x = x0 - i * D;
#pragma GCC unroll 64
    for (int d = 0; d < W; ++d) a[i][d] = std::fma(g[d], x[d], a[i][d]);
  }
}

template <int W>
void store_sums(float* acc, const float (&a)[4][W]) {
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < W; ++d) acc[i * W + d] = a[i][d];
}

// kernel_slice4 for slices of W channels: the 4 x W sums live in registers (the
// compiler cannot keep them in a buffer every row loads and stores: dc and u
// might alias it). Explicit fmas, as in row4.
template <int W>
void kernel_slice(float* acc, const float* dc, const float* u, int64_t d0, int64_t batch, int64_t time,
                  int64_t D) {
  constexpr int K = 4;
  const int64_t rows = batch * time;
  float a[K][W] = {};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t row = b * time + t;
      const float* __restrict g = dc + row * D + d0;
      // A slice reads W floats of each row, rows D floats apart: too far apart
      // for the hardware prefetcher, so the lines 8 rows ahead are asked for
      // (3-4x faster at 8 x 512 x 512, experiments/roofline.md).
      if (row + 8 < rows)
        for (int c = 0; c < W; c += 16) {
          __builtin_prefetch(g + 8 * D + c);
          __builtin_prefetch(u + (row + 8) * D + d0 + c);
        }
      add_kernel_row<W>(a, g, u + row * D + d0, t, D);
    }
  store_sums<W>(acc, a);
}

// kernel_slice and the input's gradient together, W channels: each row of dc is
// read once for both. du[row] = w0 dc[row] (or fma onto du with !overwrite),
// then fmas of the taps ahead in order, as causal_conv_backward_input's loop;
// the kernel's sums are kernel_slice's chains.
template <int W>
void backward_slice(float* du, float* acc, const float* dc, const float* u, const float* w, int64_t d0,
                    int64_t batch, int64_t time, int64_t D, bool overwrite) {
  constexpr int K = 4;
  const int64_t rows = batch * time;
  float a[K][W] = {};
  float wt[K][W];
  for (int i = 0; i < K; ++i)
    for (int d = 0; d < W; ++d) wt[i][d] = w[i * D + d0 + d];
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t row = b * time + t;
      const float* __restrict g = dc + row * D + d0;
      float* __restrict o = du + row * D + d0;
      if (row + 8 < rows)
        for (int c = 0; c < W; c += 16) {
          // The furthest tap, 3 rows ahead, of row + 8 (while it lies inside dc).
          if (row + 11 < rows) __builtin_prefetch(g + 11 * D + c);
          __builtin_prefetch(u + (row + 8) * D + d0 + c);
          __builtin_prefetch(o + 8 * D + c, 1);
        }
      float v[W];
      if (overwrite) {
#pragma GCC unroll 64
        for (int d = 0; d < W; ++d) v[d] = wt[0][d] * g[d];
      } else {
#pragma GCC unroll 64
        for (int d = 0; d < W; ++d) v[d] = std::fma(wt[0][d], g[d], o[d]);
      }
      const int64_t ahead = std::min<int64_t>(K, time - t);
      for (int64_t i = 1; i < ahead; ++i)
#pragma GCC unroll 64
        for (int d = 0; d < W; ++d) v[d] = std::fma(wt[i][d], g[i * D + d], v[d]);
#pragma GCC unroll 64
      for (int d = 0; d < W; ++d) o[d] = v[d];
      add_kernel_row<W>(a, g, u + row * D + d0, t, D);
    }
  store_sums<W>(acc, a);
}

// 32 channels at AVX-512: 8 registers of sums and 8 of taps.
#if SHAMN_ISA_SIMD == 2
constexpr int64_t kBackwardSliceWidth = 32;
#else
constexpr int64_t kBackwardSliceWidth = 16;
#endif

void backward_slice4(float* du, float* acc, const float* dc, const float* u, const float* w, int64_t d0,
                     int64_t batch, int64_t time, int64_t D, bool overwrite) {
  backward_slice<kBackwardSliceWidth>(du, acc, dc, u, w, d0, batch, time, D, overwrite);
}

// 64 channels (16 registers of sums) where the level has 32 vector registers.
#if SHAMN_ISA_SIMD == 2
constexpr int64_t kSliceWidth = 64;
#else
constexpr int64_t kSliceWidth = 16;
#endif

void kernel_slice4(float* acc, int64_t width, const float* dc, const float* u, int64_t d0, int64_t batch,
                   int64_t time, int64_t D) {
  if (width == 64 && kSliceWidth == 64) return kernel_slice<64>(acc, dc, u, d0, batch, time, D);
  SHAMN_CHECK(width == 16, "causal conv kernel slice of ", width, " channels");
  kernel_slice<16>(acc, dc, u, d0, batch, time, D);
}

}  // namespace
SHAMN_ISA_END

namespace shamn::causal_conv_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::row4, &::shamn::SHAMN_ISA_NS::kernel_slice4,
                            ::shamn::SHAMN_ISA_NS::kSliceWidth, &::shamn::SHAMN_ISA_NS::backward_slice4,
                            ::shamn::SHAMN_ISA_NS::kBackwardSliceWidth};
}  // namespace shamn::causal_conv_isa
