// AVX-512 VNNI path: one vpdpbusd (u8 x s8, four products summed into each
// int32) per block instead of AVX2's maddubs + madd pair. vpdpbusd needs an
// unsigned left operand, so as in the AVX2 path we feed |a| and b with a's sign.
// It runs on 256-bit registers (AVX512VL): on this Zen 4 a 512-bit op is two
// 256-bit halves, and pairing blocks into zmm registers cost more shuffles
// (inserts, extracts, mask ops for the sign) than it saved; measured in
// experiments/quant_kernels.md.
#include "infer/quant_dot_simd.h"

namespace shamn::quant_detail {
namespace {

// a, b: 32 signed bytes each (|a| <= 127 or a >= -8, b != -128) -> 8 int32 partial sums.
SHAMN_TARGET_AVX512 inline __m256i partial_dot(__m256i a, __m256i b) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// One block pair's partial sums, for Q8 and Q4 weights.
const auto q8_pair = [](const BlockQ8& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX512 { return partial_dot(load_q8(w), load_q8(x)); };
const auto q4_pair = [](const BlockQ4& w, const BlockQ8& x)
                         SHAMN_TARGET_AVX512 { return partial_dot(unpack_q4(w), load_q8(x)); };

}  // namespace

SHAMN_TARGET_AVX512 float dot_q8_q8_avx512(const BlockQ8* a, const BlockQ8* b, int64_t blocks) {
  return dot_blocks(a, b, blocks, q8_pair);
}

SHAMN_TARGET_AVX512 float dot_q4_q8_avx512(const BlockQ4* w, const BlockQ8* x, int64_t blocks) {
  return dot_blocks(w, x, blocks, q4_pair);
}

SHAMN_TARGET_AVX512 void dot_rows_q8_q8_avx512(const BlockQ8* w, int64_t rows, int64_t blocks_per_row,
                                               const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q8_pair);
}

SHAMN_TARGET_AVX512 void dot_rows_q4_q8_avx512(const BlockQ4* w, int64_t rows, int64_t blocks_per_row,
                                               const BlockQ8* x, float* y) {
  dot_rows_blocks(w, rows, blocks_per_row, x, y, q4_pair);
}

}  // namespace shamn::quant_detail
