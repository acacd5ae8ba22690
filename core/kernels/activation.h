#pragma once
// Fast float activations over contiguous arrays (16 lanes at a time with a
// vectorised exp): gelu (tanh form, SPEC 1.6), silu and sigmoid, and their
// backward passes (which accumulate). x, y, dx, dy: [n].
// With overwrite, gelu/silu backward write dx = dy * f'(x) instead (a fresh
// buffer; dx may be dy then, an in-place product).
// gelu(x) = 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3) is computed
// as x * sigmoid(2u), the same function with one exp and no tanh. Every element
// goes through the same 16-lane code (a short tail is padded), so the result does
// not depend on how the array is split across threads.
#include <cstdint>

namespace shamn {

// An activation a kernel applies to an operand as it reads it (the block-sparse
// layers' input: the experts' down reads gelu of the up's output).
enum class InputActivation { none, gelu, silu };

void gelu_forward(float* y, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite = false);
void silu_forward(float* y, const float* x, int64_t n);
void silu_backward(float* dx, const float* dy, const float* x, int64_t n, bool overwrite = false);
// y = f(x) and the backward pass's dx in one pass, one sigmoid per element
// instead of two: the bits of f_forward and f_backward (dx may be dy). For a
// product that reads f(x) in its backward as well as f'(x).
void gelu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n,
                           bool overwrite = false);
void silu_forward_backward(float* y, float* dx, const float* dy, const float* x, int64_t n,
                           bool overwrite = false);
void sigmoid_forward(float* y, const float* x, int64_t n);
void sigmoid_backward(float* dx, const float* dy, const float* y, int64_t n);  // y: the output

// log(sum_i exp(x[i])) of one row x [n], stable (max subtracted first), on the
// calling thread; the exps are float (within 2 ulp), the log double. The same
// bits at every kernel level. +-inf or NaN maximum: returned as it is.
double logsumexp(const float* x, int64_t n);
// y[i] = exp(x[i]) (within 2 ulp; y may be x) on the calling thread, the same
// bits at every kernel level: for short arrays inside a caller's parallel loop.
void exp_forward(float* y, const float* x, int64_t n);

// f64 (gradient checks): the obvious scalar formulas of core/kernels/elementwise.h
// element by element, the naive twins, under the same names.
void gelu_forward(double* y, const double* x, int64_t n);
void gelu_backward(double* dx, const double* dy, const double* x, int64_t n, bool overwrite = false);
void silu_forward(double* y, const double* x, int64_t n);
void silu_backward(double* dx, const double* dy, const double* x, int64_t n, bool overwrite = false);
void gelu_forward_backward(double* y, double* dx, const double* dy, const double* x, int64_t n,
                           bool overwrite = false);
void silu_forward_backward(double* y, double* dx, const double* dy, const double* x, int64_t n,
                           bool overwrite = false);
void sigmoid_forward(double* y, const double* x, int64_t n);
void sigmoid_backward(double* dx, const double* dy, const double* y, int64_t n);
void exp_forward(double* y, const double* x, int64_t n);

}  // namespace shamn
