#pragma once
// Internal to core/kernels: the causal convolution's four-tap row, one copy per
// SIMD level (causal_conv_isa.cpp, compiled per level; see core/isa.h). Each
// element is w0 x0, then three fmas in tap order at every level: the same bits.
#include <cstdint>

namespace shamn::causal_conv_isa {

struct Kernels {
  // out[d] = fma(w3[d], x3[d], fma(w2[d], x2[d], fma(w1[d], x1[d], w0[d] * x0[d]))), d < D;
  // w: [4, D], the taps' rows; x_i: the input row i tokens back.
  void (*row4)(float* out, const float* w, int64_t D, const float* x0, const float* x1, const float* x2,
               const float* x3);
  // The kernel's gradient over channels [d0, d0 + width) of rows [batch * time, D]:
  // acc[i * width + d] = sum over rows of dc[row, d0 + d] * u[row - i, d0 + d] (rows
  // i < 4 back within their sequence), rows in order: each sum one fma chain, so the
  // width changes no bit. width: kernel_slice_width, or 16 at any level.
  void (*kernel_slice4)(float* acc, int64_t width, const float* dc, const float* u, int64_t d0, int64_t batch,
                        int64_t time, int64_t D);
  int64_t kernel_slice_width;  // the widest slice kernel_slice4 keeps in registers
  // Both gradients over channels [d0, d0 + backward_slice_width) in one walk of the
  // rows: kernel_slice4's acc, and du as causal_conv_backward_input gives it
  // (w: [4, D] taps; du stored, not added to, with overwrite).
  void (*backward_slice4)(float* du, float* acc, const float* dc, const float* u, const float* w, int64_t d0,
                          int64_t batch, int64_t time, int64_t D, bool overwrite);
  int64_t backward_slice_width;
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::causal_conv_isa
