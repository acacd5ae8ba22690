#pragma once
// Internal to core/kernels: the float activations of one SIMD level
// (activation_isa.cpp, compiled per level; see core/isa.h).
#include <cstdint>

namespace shamn::activation_isa {

struct Kernels {
  void (*gelu_forward)(float* y, const float* x, int64_t n);
  void (*gelu_backward)(float* dx, const float* dy, const float* x, int64_t n, bool overwrite);
  void (*silu_forward)(float* y, const float* x, int64_t n);
  void (*silu_backward)(float* dx, const float* dy, const float* x, int64_t n, bool overwrite);
  void (*sigmoid_forward)(float* y, const float* x, int64_t n);
  void (*sigmoid_backward)(float* dx, const float* dy, const float* y, int64_t n);
  double (*logsumexp)(const float* x, int64_t n);
  void (*exp_forward)(float* y, const float* x, int64_t n);
  void (*gelu_forward_backward)(float* y, float* dx, const float* dy, const float* x, int64_t n,
                                bool overwrite);
  void (*silu_forward_backward)(float* y, float* dx, const float* dy, const float* x, int64_t n,
                                bool overwrite);
};
extern const Kernels kernels_scalar, kernels_avx2, kernels_avx512;

}  // namespace shamn::activation_isa
