#pragma once
// The Mixer's causal depthwise convolution (SPEC 1.4) as an autograd op.
#include "autograd/variable.h"

namespace shamn {

// u: [B, T, D], conv: [D, K] -> c: [B, T, D],
// c[b, t, d] = sum_{i=0}^{K-1} conv[d, i] * u[b, t - i, d], zero where t - i < 0
// (each sequence starts fresh; conv[d, 0] weighs the current token).
// Gradients flow into u and conv.
Var causal_conv(const Var& u, const Var& conv);

}  // namespace shamn
