#pragma once
// bfloat16 rounding: a float's 8 exponent bits and top 7 mantissa bits, kept in
// a float whose low 16 bits are zero. The product of two such values is exact
// in f32 (8 x 8 significant bits), so f32 FMAs over rounded operands give what
// bf16 dot-product hardware computes with f32 accumulation, up to summation
// order.
#include <bit>
#include <cstdint>
#include <vector>

namespace shamn {

// Round to nearest, ties to even (as VCVTNEPS2BF16 and PyTorch's bfloat16 cast).
// NaN stays a (quiet) NaN; infinities stay; a finite value above the largest
// bf16 rounds to infinity; subnormals round like any other value.
inline float round_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
  return std::bit_cast<float>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Two bf16 values in the 32 bits of one float slot, as AVX512_BF16's
// vdpbf16ps reads them: `high` in the top 16 bits, `low` in the bottom 16
// (both already bf16, i.e. rounded floats). The slot is bits, not a number.
inline float bf16_pair(float high, float low) {
  return std::bit_cast<float>((std::bit_cast<uint32_t>(high) & 0xffff0000u) |
                              (std::bit_cast<uint32_t>(low) >> 16));
}
inline float bf16_pair_high(float pair) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(pair) & 0xffff0000u);
}
inline float bf16_pair_low(float pair) { return std::bit_cast<float>(std::bit_cast<uint32_t>(pair) << 16); }

// dst[i] = round_to_bf16(src[i]); dst may be src. Parallel over large n.
void round_to_bf16(float* dst, const float* src, int64_t n);

// src: [rows, cols] at row stride ld -> a contiguous [rows, cols] copy rounded
// to bf16 (ld = cols for a flat array): the operands of the few products that
// do not round as they pack.
std::vector<float> rounded_copy(const float* src, int64_t rows, int64_t cols, int64_t ld);

}  // namespace shamn
