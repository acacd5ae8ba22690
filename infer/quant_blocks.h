#pragma once
// Quantisation blocks for the inference runtime, after llama.cpp's
// Q8_0 / Q4_0 idea: a row is cut into blocks of 32 values, each stored as one
// float scale d and 32 small integers q, with x ~= d * q.
//
//   BlockQ8: q in [-127, 127], d = max|x| / 127. Per element |x - d*q| <= d/2.
//   BlockQ4: q in [-7, 7], d = max|x| / 7, stored as the nibble q + 8 (1..15).
//            Per element |x - d*q| <= d/2.
//
// Q4 is symmetric on purpose: llama.cpp's Q4_0 maps the signed extreme to -8
// and so gains one level, but then the opposite extreme can clip to +7 with an
// error up to d; keeping -7..7 gives the same d/2 bound as Q8 everywhere and a
// zero point at exactly 0 (the nibble 8), so the dot kernels need no offset
// correction beyond "subtract 8".
//
// Q4 packing: byte j (0..15) holds element j in its low nibble and element
// j + 16 in its high nibble, so SIMD code gets elements 0..15 with one mask and
// 16..31 with one shift.
//
// A row of n values takes ceil(n / 32) blocks; when n is not a multiple of 32
// the last block is zero-padded (q = 0 past n), so padded elements add nothing
// to a dot product. An all-zero block gets d = 0 and q = 0 (never NaN).
#include <cstddef>
#include <cstdint>

namespace shamn {

inline constexpr int64_t kQuantBlock = 32;

struct BlockQ8 {
  float d;                // scale
  int8_t q[kQuantBlock];  // x[i] ~= d * q[i]
};
static_assert(sizeof(BlockQ8) == 36, "BlockQ8 is 4 + 32 bytes, no padding");
static_assert(alignof(BlockQ8) == 4, "BlockQ8 arrays are float-aligned");
static_assert(offsetof(BlockQ8, q) == 4);

struct BlockQ4 {
  float d;                     // scale
  uint8_t q[kQuantBlock / 2];  // low nibble: element j, high nibble: element j+16; value = nibble - 8
};
static_assert(sizeof(BlockQ4) == 20, "BlockQ4 is 4 + 16 bytes, no padding");
static_assert(alignof(BlockQ4) == 4, "BlockQ4 arrays are float-aligned");
static_assert(offsetof(BlockQ4, q) == 4);

// Number of blocks a row of n values takes.
inline constexpr int64_t quant_blocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

// x: [n]  out: [quant_blocks(n)]
// quantize_row_q8 runs the SIMD path unless the scalar kernel is selected
// (infer/quant_dot.h); both give the same bytes.
void quantize_row_q8(const float* x, BlockQ8* out, int64_t n);
void quantize_row_q8_scalar(const float* x, BlockQ8* out, int64_t n);
// The same, and sums[j] = the sum of block j's 32 values (what the VNNI
// products need; q8_block_sums, infer/low_rank_q8.h), in one pass.
void quantize_row_q8_sums(const float* x, BlockQ8* out, int32_t* sums, int64_t n);
void quantize_row_q4(const float* x, BlockQ4* out, int64_t n);
// For weights (export): the same format, each block's scale refitted by least
// squares over a small search. Slower, and a single element may err by more
// than d/2, but each block's total squared error is never above the plain
// rounding's (the search includes its levels).
void quantize_row_q4_fitted(const float* x, BlockQ4* out, int64_t n);

// in: [quant_blocks(n)]  acc: [n]. acc[i] = fma(w, d * q[i], acc[i]): a
// dequantised row scaled into an accumulator (a memory-bank value row, an
// embedding row), on the selected kernel path, the same bits on each.
void add_scaled_row_q8(const BlockQ8* in, int64_t n, float w, float* acc);

// in: [quant_blocks(n)]  y: [n] (the padding past n is not written)
void dequantize_row_q8(const BlockQ8* in, float* y, int64_t n);
void dequantize_row_q4(const BlockQ4* in, float* y, int64_t n);

// The signed value of element i (0..31) of a Q4 block.
inline int q4_value(const BlockQ4& b, int i) { return i < 16 ? (b.q[i] & 0x0F) - 8 : (b.q[i - 16] >> 4) - 8; }

}  // namespace shamn
