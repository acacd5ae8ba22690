#include "core/kernels/activation.h"

#include <cmath>

#include "core/kernel_level.h"
#include "core/kernels/activation_isa.h"
#include "core/kernels/elementwise.h"

namespace shamn {
namespace {

const activation_isa::Kernels* const kLevels[] = {
    &activation_isa::kernels_scalar, &activation_isa::kernels_avx2, &activation_isa::kernels_avx512};
const activation_isa::Kernels& kernels() { return for_kernel_level(kLevels); }

}  // namespace

void gelu_forward(float* y, const float* x, int64_t n) { kernels().gelu_forward(y, x, n); }
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  kernels().gelu_backward(dx, dy, x, n, overwrite);
}
void silu_forward(float* y, const float* x, int64_t n) { kernels().silu_forward(y, x, n); }
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  kernels().silu_backward(dx, dy, x, n, overwrite);
}
void sigmoid_forward(float* y, const float* x, int64_t n) { kernels().sigmoid_forward(y, x, n); }
void sigmoid_backward(float* dx, const float* dy, const float* y, int64_t n) {
  kernels().sigmoid_backward(dx, dy, y, n);
}
void gelu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  kernels().gelu_forward_backward(y, dx, dy, x, n, overwrite);
}
void silu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n, bool overwrite) {
  kernels().silu_forward_backward(y, dx, dy, x, n, overwrite);
}
double logsumexp(const float* x, int64_t n) { return kernels().logsumexp(x, n); }
void exp_forward(float* y, const float* x, int64_t n) { kernels().exp_forward(y, x, n); }

void gelu_forward(double* y, const double* x, int64_t n) {
  map_forward(y, x, n, [](double v) { return Gelu<double>::forward(v); });
}
void gelu_backward(double* dx, const double* dy, const double* x, int64_t n, bool overwrite) {
  map_backward(
      dx, dy, x, x, n, [](double v, double) { return Gelu<double>::derivative(v); }, overwrite);
}
void silu_forward(double* y, const double* x, int64_t n) {
  map_forward(y, x, n, [](double v) { return Silu<double>::forward(v); });
}
void silu_backward(double* dx, const double* dy, const double* x, int64_t n, bool overwrite) {
  map_backward(
      dx, dy, x, x, n, [](double v, double) { return Silu<double>::derivative(v); }, overwrite);
}
// The f64 twins: the two passes.
void gelu_forward_backward(double* y, double* dx, const double* dy, const double* x, int64_t n,
                           bool overwrite) {
  gelu_forward(y, x, n);
  gelu_backward(dx, dy, x, n, overwrite);
}
void silu_forward_backward(double* y, double* dx, const double* dy, const double* x, int64_t n,
                           bool overwrite) {
  silu_forward(y, x, n);
  silu_backward(dx, dy, x, n, overwrite);
}
void sigmoid_forward(double* y, const double* x, int64_t n) {
  map_forward(y, x, n, [](double v) { return sigmoid(v); });
}
void sigmoid_backward(double* dx, const double* dy, const double* y, int64_t n) {
  map_backward(dx, dy, y, y, n, [](double, double s) { return s * (1.0 - s); });
}
void exp_forward(double* y, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace shamn
