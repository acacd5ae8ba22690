#pragma once
// Causal depthwise convolution over time (SPEC 1.4), per sequence:
//   c[b, t, d] = sum_{i=0}^{K-1} conv[d, i] * u[b, t - i, d]   (terms with t - i < 0 vanish)
// conv[d, 0] weighs the current token (the reverse of a cross-correlation weight).
//
// Operands: u, du, c, dc: [B, T, D]   conv, dconv: [D, K]
// Backward kernels accumulate (+=). The float kernels give the same bits for any
// thread count; the `_naive` twins are the test oracle and the f64 path.
#include <cstdint>
#include <vector>

namespace shamn {

struct CausalConvDims {
  int64_t batch = 0;   // B
  int64_t time = 0;    // T
  int64_t dim = 0;     // D
  int64_t kernel = 0;  // K
};

void causal_conv_forward(float* c, const float* u, const float* conv, const CausalConvDims& dims);
// Decoding, one sequence (dims.batch == 1) continued from an earlier call: the K-1
// inputs before u[0] come from history [K-1, D] (oldest first) instead of vanishing,
// and history then holds the last K-1 inputs. The same bits as causal_conv_forward
// over history and u joined (the rows after the history).
void causal_conv_forward_streaming(float* c, const float* u, float* history, const float* conv,
                                   const CausalConvDims& dims);

// The kernel conv [D, K] transposed to taps [K, D] (D contiguous, the layout
// every row of the convolution reads), for callers that convolve a sequence a
// few rows at a time.
struct CausalConvTaps {
  CausalConvTaps(const float* conv, int64_t d, int64_t k);  // conv [d, k]
  std::vector<float> w;                                     // [K, D]
  int64_t dim = 0, kernel = 0;
};
// Rows [t0, t1) of causal_conv_forward_streaming's c, on the calling thread;
// history is only read. u, c: the sequence's [T, D] (rows t0-K+1 .. t1-1 of u
// are read, those before row 0 from history). The same bits as the whole call.
void causal_conv_rows_streaming(float* c, const float* u, const float* history, const CausalConvTaps& taps,
                                int64_t t0, int64_t t1);
// history [K-1, D] <- the last K-1 rows of history and u [T, D] joined: what
// causal_conv_forward_streaming leaves there.
void causal_conv_advance_history(float* history, const float* u, int64_t T, int64_t D, int64_t K);
// du += the input's gradient; du = ... instead with overwrite (a fresh buffer:
// no zero fill, no read of it).
void causal_conv_backward_input(float* du, const float* dc, const float* conv, const CausalConvDims& dims,
                                bool overwrite = false);
void causal_conv_backward_kernel(float* dconv, const float* dc, const float* u, const CausalConvDims& dims);
// Both, with the bits of the two calls: for four taps in one walk over slices of
// channels (dc read once for both), else the two calls.
void causal_conv_backward(float* du, float* dconv, const float* dc, const float* u, const float* conv,
                          const CausalConvDims& dims, bool overwrite = false);

template <class T>
void causal_conv_forward_naive(T* c, const T* u, const T* conv, const CausalConvDims& s) {
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.time; ++t)
      for (int64_t d = 0; d < s.dim; ++d) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.kernel && i <= t; ++i)
          acc += static_cast<double>(conv[d * s.kernel + i]) * u[(b * s.time + t - i) * s.dim + d];
        c[(b * s.time + t) * s.dim + d] = static_cast<T>(acc);
      }
}

template <class T>
void causal_conv_backward_input_naive(T* du, const T* dc, const T* conv, const CausalConvDims& s,
                                      bool overwrite = false) {
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.time; ++t)
      for (int64_t d = 0; d < s.dim; ++d) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.kernel && t + i < s.time; ++i)
          acc += static_cast<double>(conv[d * s.kernel + i]) * dc[(b * s.time + t + i) * s.dim + d];
        T& out = du[(b * s.time + t) * s.dim + d];
        out = overwrite ? static_cast<T>(acc) : out + static_cast<T>(acc);
      }
}

template <class T>
void causal_conv_backward_kernel_naive(T* dconv, const T* dc, const T* u, const CausalConvDims& s) {
  for (int64_t d = 0; d < s.dim; ++d)
    for (int64_t i = 0; i < s.kernel; ++i) {
      double acc = 0.0;
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t t = i; t < s.time; ++t)
          acc += static_cast<double>(dc[(b * s.time + t) * s.dim + d]) * u[(b * s.time + t - i) * s.dim + d];
      dconv[d * s.kernel + i] += static_cast<T>(acc);
    }
}

// f64 (gradient checks): the naive loops, so an op calls one name for both dtypes.
inline void causal_conv_forward(double* c, const double* u, const double* conv, const CausalConvDims& dims) {
  causal_conv_forward_naive(c, u, conv, dims);
}
inline void causal_conv_backward_input(double* du, const double* dc, const double* conv,
                                       const CausalConvDims& dims, bool overwrite = false) {
  causal_conv_backward_input_naive(du, dc, conv, dims, overwrite);
}
inline void causal_conv_backward_kernel(double* dconv, const double* dc, const double* u,
                                        const CausalConvDims& dims) {
  causal_conv_backward_kernel_naive(dconv, dc, u, dims);
}
inline void causal_conv_backward(double* du, double* dconv, const double* dc, const double* u,
                                 const double* conv, const CausalConvDims& dims, bool overwrite = false) {
  causal_conv_backward_input_naive(du, dc, conv, dims, overwrite);
  causal_conv_backward_kernel_naive(dconv, dc, u, dims);
}

}  // namespace shamn
