#pragma once
// Internal to core/kernels: the activations on sixteen lanes (simd::F) for the
// SIMD level of the including source (core/isa.h), shared by the activation
// passes (activation_isa.cpp) and the kernels that apply an activation to an
// operand as they pack it (block_sparse_isa.cpp), so both give the same bits.
#include "core/kernels/activation.h"
#include "core/simd.h"

SHAMN_ISA_PUSH
namespace shamn::act16 {
inline namespace SHAMN_ISA_NS {

using simd::F;
using simd::splat;

inline F sigmoid(F x) { return splat(1.0f) / (splat(1.0f) + simd::exp(-x)); }

inline constexpr float kAlpha2 = 2.0f * 0.7978845608028654f;  // 2 sqrt(2/pi)
inline constexpr float kBeta = 0.044715f;

struct Gelu {
  static F forward(F x) { return x * sigmoid(splat(kAlpha2) * (x + splat(kBeta) * x * x * x)); }
  // d/dx x s(2u) = s + x s (1 - s) 2u'(x),  2u' = 2 sqrt(2/pi) (1 + 3 beta x^2)
  static F derivative(F x) {
    const F s = sigmoid(splat(kAlpha2) * (x + splat(kBeta) * x * x * x));
    const F du = splat(kAlpha2) * (splat(1.0f) + splat(3.0f * kBeta) * x * x);
    return s + x * s * (splat(1.0f) - s) * du;
  }
  // Both at once, one sigmoid: the bits of forward and derivative.
  static void forward_and_derivative(F x, F& y, F& d) {
    const F s = sigmoid(splat(kAlpha2) * (x + splat(kBeta) * x * x * x));
    const F du = splat(kAlpha2) * (splat(1.0f) + splat(3.0f * kBeta) * x * x);
    y = x * s;
    d = s + y * (splat(1.0f) - s) * du;
  }
};

struct Silu {
  static F forward(F x) { return x * sigmoid(x); }
  static F derivative(F x) {
    const F s = sigmoid(x);
    return s * (splat(1.0f) + x * (splat(1.0f) - s));
  }
  static void forward_and_derivative(F x, F& y, F& d) {
    const F s = sigmoid(x);
    y = x * s;
    d = s * (splat(1.0f) + x * (splat(1.0f) - s));
  }
};

// v[i] = act(v[i]) for i < N, lane by lane (none: unchanged). The N chains are
// independent: unrolled, the core overlaps their exps and divisions.
template <int N>
[[gnu::always_inline]] inline void apply(F (&v)[N], InputActivation act) {
  if (act == InputActivation::gelu) {
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) v[i] = Gelu::forward(v[i]);
  } else if (act == InputActivation::silu) {
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) v[i] = Silu::forward(v[i]);
  }
}

}  // namespace SHAMN_ISA_NS
}  // namespace shamn::act16
SHAMN_ISA_POP
