#include "infer/quant_blocks.h"

#include <algorithm>
#include <cmath>

#include "infer/quant_dot_paths.h"
#include "infer/quant_kernels.h"

namespace shamn {
namespace {

// Copies block b of x into a zero-padded buffer of 32 and returns max|x|.
float load_block(const float* x, int64_t n, int64_t b, float* buf) {
  const int64_t begin = b * kQuantBlock;
  const int64_t len = std::min<int64_t>(kQuantBlock, n - begin);
  float amax = 0.0f;
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    buf[i] = i < len ? x[begin + i] : 0.0f;
    amax = std::max(amax, std::fabs(buf[i]));
  }
  return amax;
}

// v rounded to nearest, ties away from zero (as std::round), clamped to
// [-limit, limit]. Written with trunc and no branches so the 32-value loops
// vectorise: v - trunc(v) is exact, so the half-way test is too.
inline float round_clamped(float v, float limit) {
  float r = std::trunc(v);
  r += std::fabs(v - r) >= 0.5f ? std::copysign(1.0f, v) : 0.0f;
  return std::clamp(r, -limit, limit);
}

// d == 0 (an all-zero block) gives 0.
inline int quantize_value(float x, float d, int limit) {
  return d == 0.0f ? 0 : static_cast<int>(round_clamped(x / d, static_cast<float>(limit)));
}

void pack_q4(const float* buf, float d, BlockQ4& out) {
  out.d = d;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int lo = quantize_value(buf[j], d, 7) + 8;
    const int hi = quantize_value(buf[j + 16], d, 7) + 8;
    out.q[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// The scale with the least squared error over a few grids: for each, the
// levels are rounded from amax / (7 + 0.1 s), then the scale is refitted to
// them by least squares, d = sum(x q) / sum(q^2), which minimises
// sum (x - d q)^2 for those levels. Lowering the error per block this way is
// what lets weights lose less at 4 bits than plain rounding does.
float fitted_q4_scale(const float* buf, float amax) {
  if (amax == 0.0f) return 0.0f;
  double best_gain = -1.0;
  float best = amax / 7.0f;
  for (int s = -9; s <= 9; ++s) {
    const float d0 = amax / (7.0f + 0.1f * static_cast<float>(s));
    double sxq = 0.0, sqq = 0.0;
    for (int i = 0; i < kQuantBlock; ++i) {
      const int q = quantize_value(buf[i], d0, 7);
      sxq += static_cast<double>(buf[i]) * q;
      sqq += static_cast<double>(q) * q;
    }
    // The error at the fitted scale is sum x^2 - sxq^2 / sqq: maximise the second term.
    if (sqq > 0.0 && sxq * sxq / sqq > best_gain) {
      best_gain = sxq * sxq / sqq;
      best = static_cast<float>(sxq / sqq);
    }
  }
  return best;
}

}  // namespace

void quantize_row_q8(const float* x, BlockQ8* out, int64_t n) {
  quant_kernels().quantize_row_q8(x, out, nullptr, n);
}

void quantize_row_q8_sums(const float* x, BlockQ8* out, int32_t* sums, int64_t n) {
  quant_kernels().quantize_row_q8(x, out, sums, n);
}

void quantize_row_q8_scalar(const float* x, BlockQ8* out, int64_t n) {
  float buf[kQuantBlock];
  for (int64_t b = 0; b < quant_blocks(n); ++b) {
    const float d = load_block(x, n, b, buf) / 127.0f;
    out[b].d = d;
    if (d == 0.0f) {
      std::fill_n(out[b].q, kQuantBlock, int8_t{0});
      continue;
    }
    for (int i = 0; i < kQuantBlock; ++i)
      out[b].q[i] = static_cast<int8_t>(round_clamped(buf[i] / d, 127.0f));
  }
}

void quantize_row_q4(const float* x, BlockQ4* out, int64_t n) {
  float buf[kQuantBlock];
  for (int64_t b = 0; b < quant_blocks(n); ++b) pack_q4(buf, load_block(x, n, b, buf) / 7.0f, out[b]);
}

void quantize_row_q4_fitted(const float* x, BlockQ4* out, int64_t n) {
  float buf[kQuantBlock];
  for (int64_t b = 0; b < quant_blocks(n); ++b) {
    const float amax = load_block(x, n, b, buf);
    pack_q4(buf, fitted_q4_scale(buf, amax), out[b]);
  }
}

void add_scaled_row_q8(const BlockQ8* in, int64_t n, float w, float* acc) {
  const int64_t full = n / kQuantBlock;
  quant_kernels().add_scaled_q8(in, full, w, acc);
  if (full * kQuantBlock < n)
    quant_detail::add_scaled_q8_scalar(in + full, n - full * kQuantBlock, w, acc + full * kQuantBlock);
}

namespace quant_detail {

void quantize_row_q8_sums_scalar(const float* x, BlockQ8* out, int32_t* sums, int64_t n) {
  quantize_row_q8_scalar(x, out, n);
  if (sums) q8_block_sums_scalar(out, quant_blocks(n), sums);
}

void quantize_row_q8_sums_avx2(const float* x, BlockQ8* out, int32_t* sums, int64_t n) {
  quantize_row_q8_avx2(x, out, n);
  if (sums) q8_block_sums_avx2(out, quant_blocks(n), sums);
}

void add_scaled_q8_scalar(const BlockQ8* in, int64_t n, float w, float* acc) {
  for (int64_t i = 0; i < n; ++i) {
    const BlockQ8& b = in[i / kQuantBlock];
    acc[i] = std::fma(w, b.d * static_cast<float>(b.q[i % kQuantBlock]), acc[i]);
  }
}

void add_scaled_blocks_q8_scalar(const BlockQ8* in, int64_t blocks, float w, float* acc) {
  add_scaled_q8_scalar(in, blocks * kQuantBlock, w, acc);
}

}  // namespace quant_detail

void dequantize_row_q8(const BlockQ8* in, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const BlockQ8& block = in[i / kQuantBlock];
    y[i] = block.d * block.q[i % kQuantBlock];
  }
}

void dequantize_row_q4(const BlockQ4* in, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = in[i / kQuantBlock].d *
           static_cast<float>(q4_value(in[i / kQuantBlock], static_cast<int>(i % kQuantBlock)));
}

}  // namespace shamn
