// The causal convolution's four-tap row, compiled once per SIMD level: the
// baseline build ran it 8 lanes wide, where it was 4% of a runtime prefill.
#include "core/kernels/causal_conv_isa.h"

#include <cmath>

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

}  // namespace
SHAMN_ISA_END

namespace shamn::causal_conv_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::row4};
}  // namespace shamn::causal_conv_isa
