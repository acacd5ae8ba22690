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
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::causal_conv_isa
