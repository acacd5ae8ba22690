#include "core/kernels/causal_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/ceil_div.h"
#include "core/check.h"
#include "core/kernel_level.h"
#include "core/kernels/causal_conv_isa.h"
#include "core/kernels/elementwise.h"
#include "core/parallel.h"

// Every loop runs along D innermost, where rows are contiguous, so it vectorises; the
// kernel is transposed to [K, D] once for that.

namespace shamn {
namespace {

std::vector<float> transpose_kernel(const float* conv, const CausalConvDims& s) {
  std::vector<float> w(static_cast<size_t>(s.kernel * s.dim));
  for (int64_t d = 0; d < s.dim; ++d)
    for (int64_t i = 0; i < s.kernel; ++i) w[static_cast<size_t>(i * s.dim + d)] = conv[d * s.kernel + i];
  return w;
}

const causal_conv_isa::Kernels* const kLevels[] = {
    &causal_conv_isa::kernels_scalar, &causal_conv_isa::kernels_avx2, &causal_conv_isa::kernels_avx512};

// out[d] = sum_{i < taps} w[i, d] * input(i)[d], tap 0 (the current token) first.
// w: [K, D]; input(i) is the row i tokens back. Four taps (the default kernel)
// are summed in one pass, in registers, by the SIMD level's kernel; others take
// a pass over out per tap. The order per element, and so every bit, is the same
// either way.
template <class InputAt>
void conv_row(float* __restrict out, const float* w, int64_t D, int64_t taps, InputAt input) {
  if (taps == 4) return for_kernel_level(kLevels).row4(out, w, D, input(0), input(1), input(2), input(3));
  const float* __restrict x = input(0);
  for (int64_t d = 0; d < D; ++d) out[d] = w[d] * x[d];
  for (int64_t i = 1; i < taps; ++i) {
    const float* __restrict wi = w + i * D;
    const float* __restrict xi = input(i);
    for (int64_t d = 0; d < D; ++d) out[d] += wi[d] * xi[d];
  }
}

}  // namespace

void causal_conv_forward(float* c, const float* u, const float* conv, const CausalConvDims& s) {
  const std::vector<float> w = transpose_kernel(conv, s);
  const int64_t D = s.dim;
  parallel_for(0, s.batch * s.time, row_grain(D * s.kernel), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t t = row % s.time;
      conv_row(c + row * D, w.data(), D, std::min(s.kernel, t + 1),
               [&](int64_t i) { return u + (row - i) * D; });
    }
  });
}

void causal_conv_forward_streaming(float* c, const float* u, float* history, const float* conv,
                                   const CausalConvDims& s) {
  SHAMN_CHECK(s.batch == 1, "causal_conv_forward_streaming: one sequence, not ", s.batch);
  const CausalConvTaps taps(conv, s.dim, s.kernel);
  parallel_for(0, s.time, row_grain(s.dim * s.kernel),
               [&](int64_t lo, int64_t hi) { causal_conv_rows_streaming(c, u, history, taps, lo, hi); });
  causal_conv_advance_history(history, u, s.time, s.dim, s.kernel);
}

CausalConvTaps::CausalConvTaps(const float* conv, int64_t d, int64_t k)
    : w(transpose_kernel(conv, CausalConvDims{1, 0, d, k})), dim(d), kernel(k) {}

void causal_conv_rows_streaming(float* c, const float* u, const float* history, const CausalConvTaps& taps,
                                int64_t t0, int64_t t1) {
  const int64_t D = taps.dim, H = taps.kernel - 1;
  auto input_at = [&](int64_t t) { return t >= 0 ? u + t * D : history + (H + t) * D; };
  for (int64_t t = t0; t < t1; ++t)
    conv_row(c + t * D, taps.w.data(), D, taps.kernel, [&](int64_t i) { return input_at(t - i); });
}

void causal_conv_advance_history(float* history, const float* u, int64_t T, int64_t D, int64_t K) {
  // The new history, oldest first, is rows T-H .. T-1 of history and u joined:
  // the newest H - T rows of history moved to the front (in place: a decode
  // step does this for every stream and layer), then u's last min(T, H) rows.
  const int64_t H = K - 1, kept = std::max<int64_t>(0, H - T);
  if (kept > 0) std::memmove(history, history + T * D, sizeof(float) * static_cast<size_t>(kept * D));
  std::copy_n(u + (T - (H - kept)) * D, (H - kept) * D, history + kept * D);
}

void causal_conv_backward_input(float* du, const float* dc, const float* conv, const CausalConvDims& s,
                                bool overwrite) {
  const std::vector<float> w = transpose_kernel(conv, s);
  const int64_t D = s.dim;
  parallel_for(0, s.batch * s.time, row_grain(D * s.kernel), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t t = row % s.time;
      float* g = du + row * D;
      int64_t i = 0;
      if (overwrite) {  // tap 0 stores (0 + w0 * g0 is the same value)
        for (int64_t d = 0; d < D; ++d) g[d] = w[d] * dc[row * D + d];
        i = 1;
      }
      // Explicit fmas, as in the level's one-pass kernel (backward_slice4): left
      // to the compiler, an unoptimised or -O1 build (the sanitizers') rounds
      // the product and the sum apart.
      for (; i < s.kernel && t + i < s.time; ++i) {
        const float* wi = w.data() + i * D;
        const float* gi = dc + (row + i) * D;
        for (int64_t d = 0; d < D; ++d) g[d] = std::fma(wi[d], gi[d], g[d]);
      }
    }
  });
}

namespace {

// dconv [D, K] += a slice's sums acc [K, stride] for its channels [d0, d0 + n).
void add_slice_sums(float* dconv, const float* acc, int64_t d0, int64_t n, int64_t stride, int64_t K) {
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < K; ++i) dconv[(d0 + d) * K + i] += acc[i * stride + d];
}

}  // namespace

// Parallel over slices of D: each task sums its slice of dconv over all B*T rows in
// order, so no partial sums are combined and the thread count cannot change a bit.
// A slice walks every row; the level's widest slice (64 channels at AVX-512, four
// cache lines of a row per visit) walks them a quarter as often as 16 channels, and
// is used while it still leaves a slice for every thread. The width changes no bit.
void causal_conv_backward_kernel(float* dconv, const float* dc, const float* u, const CausalConvDims& s) {
  const causal_conv_isa::Kernels& level = for_kernel_level(kLevels);
  const int64_t D = s.dim, K = s.kernel;
  const int64_t wide = level.kernel_slice_width;
  const int64_t slice = K == 4 && D / wide >= num_threads() ? wide : 16;
  parallel_for(0, ceil_div(D, slice), 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(K * slice));
    for (int64_t sl = lo; sl < hi; ++sl) {
      const int64_t d0 = sl * slice, dn = std::min(slice, D - d0);
      if (K == 4 && dn == slice) {
        level.kernel_slice4(acc.data(), slice, dc, u, d0, s.batch, s.time, D);
      } else {
        // Explicit fmas, as in the level's kernel: the same chain per channel.
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t t = 0; t < s.time; ++t) {
            const int64_t row = b * s.time + t;
            const float* g = dc + row * D + d0;
            for (int64_t i = 0; i < K && i <= t; ++i) {
              const float* x = u + (row - i) * D + d0;
              float* a = acc.data() + i * slice;
              for (int64_t d = 0; d < dn; ++d) a[d] = std::fma(g[d], x[d], a[d]);
            }
          }
      }
      add_slice_sums(dconv, acc.data(), d0, dn, slice, K);
    }
  });
}

void causal_conv_backward(float* du, float* dconv, const float* dc, const float* u, const float* conv,
                          const CausalConvDims& s, bool overwrite) {
  const causal_conv_isa::Kernels& level = for_kernel_level(kLevels);
  const int64_t W = level.backward_slice_width, D = s.dim, K = s.kernel;
  if (K != 4 || D % W != 0) {
    causal_conv_backward_input(du, dc, conv, s, overwrite);
    causal_conv_backward_kernel(dconv, dc, u, s);
    return;
  }
  const std::vector<float> w = transpose_kernel(conv, s);
  parallel_for(0, D / W, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(K * W));
    for (int64_t sl = lo; sl < hi; ++sl) {
      const int64_t d0 = sl * W;
      level.backward_slice4(du, acc.data(), dc, u, w.data(), d0, s.batch, s.time, D, overwrite);
      add_slice_sums(dconv, acc.data(), d0, W, W, K);
    }
  });
}

}  // namespace shamn
