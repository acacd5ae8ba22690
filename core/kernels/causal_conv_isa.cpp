// The causal convolution's four-tap row, compiled once per SIMD level: the
// baseline build ran it 8 lanes wide, where it was 4% of a runtime prefill.
#include "core/kernels/causal_conv_isa.h"

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
      const int64_t taps = t >= K - 1 ? K : t + 1;
      if (taps == K) {
#pragma GCC unroll 4
        for (int i = 0; i < K; ++i) {
          const float* __restrict x = u + (row - i) * D + d0;
#pragma GCC unroll 64
          for (int d = 0; d < W; ++d) a[i][d] = std::fma(g[d], x[d], a[i][d]);
        }
        continue;
      }
      for (int64_t i = 0; i < taps; ++i) {
        const float* __restrict x = u + (row - i) * D + d0;
#pragma GCC unroll 64
        for (int d = 0; d < W; ++d) a[i][d] = std::fma(g[d], x[d], a[i][d]);
      }
    }
  for (int i = 0; i < K; ++i)
    for (int d = 0; d < W; ++d) acc[i * W + d] = a[i][d];
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
                            ::shamn::SHAMN_ISA_NS::kSliceWidth};
}  // namespace shamn::causal_conv_isa
