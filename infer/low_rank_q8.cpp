#include "infer/low_rank_q8.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "infer/quant_dot_paths.h"
#include "infer/quant_kernels.h"

namespace shamn {

LowRankQ8 pack_low_rank_q8(const BlockQ8* w, int64_t rows, int64_t cols) {
  constexpr int64_t kC = LowRankQ8::kChunk, kG = LowRankQ8::kGroup;
  LowRankQ8 p;
  p.rows = rows;
  p.cols = cols;
  const int64_t blocks = p.blocks();
  for (int64_t j = 0; j < blocks; ++j) p.groups += p.groups_in_block(j);
  p.packed = Buffer<int8_t>(p.chunks() * p.groups * kC * kG);
  p.d = Buffer<float>(p.chunks() * blocks * kC);
  std::fill_n(p.packed.data(), p.packed.size(), int8_t{0});
  std::fill_n(p.d.data(), p.d.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = r / kC, lane = r % kC;
    int8_t* chunk = p.packed.data() + c * p.groups * kC * kG;
    // Blocks hold whole groups, so column k is in group k / 4 (only the last block is partial).
    for (int64_t j = 0; j < blocks; ++j) {
      const BlockQ8& b = w[r * blocks + j];
      p.d[(c * blocks + j) * kC + lane] = b.d;
      for (int64_t k = j * kQuantBlock; k < std::min(cols, (j + 1) * kQuantBlock); ++k)
        chunk[(k / kG * kC + lane) * kG + k % kG] = b.q[k - j * kQuantBlock];
    }
  }
  return p;
}

void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, const int32_t* sums, int64_t stride, int64_t n,
                     const int32_t* y_rows, float c, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  SHAMN_CHECK(r0 % LowRankQ8::kChunk == 0 && 0 <= r0 && r0 <= r1 && r1 <= w.rows && stride >= w.blocks(),
              "low-rank rows [", r0, ", ", r1, ") of ", w.rows, ", input stride ", stride);
  quant_kernels().low_rank_add(w, LowRankInput{x, sums, stride, n, y_rows}, c, y, y_stride, r0, r1);
}

void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, const int32_t* sums, float c, float* y) {
  low_rank_add_q8(w, x, sums, w.blocks(), 1, nullptr, c, y, w.rows, 0, w.rows);
}

void q8_block_sums(const BlockQ8* x, int64_t blocks, int32_t* sums) {
  quant_kernels().block_sums(x, blocks, sums);
}

namespace quant_detail {

void q8_block_sums_scalar(const BlockQ8* x, int64_t blocks, int32_t* sums) {
  for (int64_t j = 0; j < blocks; ++j) {
    int32_t s = 0;
    for (int i = 0; i < kQuantBlock; ++i) s += x[j].q[i];
    sums[j] = s;
  }
}

void low_rank_add_q8_scalar(const LowRankQ8& w, const LowRankInput& in, float c, float* y, int64_t y_stride,
                            int64_t r0, int64_t r1) {
  constexpr int64_t kC = LowRankQ8::kChunk, kG = LowRankQ8::kGroup;
  const int64_t blocks = w.blocks();
  for (int64_t t = 0; t < in.n; ++t) {
    const BlockQ8* x = in.x + t * in.stride;
    float* yt = y + in.y_row(t) * y_stride;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t ch = r / kC, lane = r % kC;
      const int8_t* chunk = w.packed.data() + ch * w.groups * kC * kG;
      float acc = 0;
      for (int64_t j = 0, g0 = 0; j < blocks; g0 += w.groups_in_block(j), ++j) {
        int32_t isum = 0;
        for (int64_t g = 0; g < w.groups_in_block(j); ++g)
          for (int64_t i = 0; i < kG; ++i)
            isum += int32_t{x[j].q[g * kG + i]} * int32_t{chunk[((g0 + g) * kC + lane) * kG + i]};
        acc = std::fma(x[j].d * w.d[(ch * blocks + j) * kC + lane], static_cast<float>(isum), acc);
      }
      yt[r] = std::fma(c, acc, yt[r]);
    }
  }
}

}  // namespace quant_detail

}  // namespace shamn
