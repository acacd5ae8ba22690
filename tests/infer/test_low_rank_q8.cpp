#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/kernel_level.h"
#include "infer/low_rank_q8.h"
#include "infer/quant_blocks.h"

using namespace shamn;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

double dequantised(const BlockQ8* row, int64_t k) {
  return double{row[k / kQuantBlock].d} * row[k / kQuantBlock].q[k % kQuantBlock];
}

}  // namespace

TEST_CASE("the low-rank int8 product equals its f64 value and is bitwise the same at every kernel level",
          "[infer][quant][lora]") {
  const KernelLevel saved = kernel_level();
  // A's shapes (few rows, many columns) and B's (many rows, few columns): rows
  // with and without a partial chunk of 8, columns below, at and past one
  // block and in partial groups of 4. B's shapes at every count of groups
  // (AVX-512 has a tile kernel for each), over row counts that leave 1 to 3
  // chunks past its tiles of 2 or 4.
  for (int64_t rows : {1, 8, 20, 60, 100, 256}) {
    for (int64_t cols : {1, 3, 4, 8, 12, 13, 20, 24, 28, 32, 33, 70, 256}) {
      INFO(rows << " x " << cols);
      const int64_t blocks = quant_blocks(cols), stride = blocks + 1;  // input rows with a gap between them
      std::vector<float> w = random_values(rows * cols, 3);
      if (rows == 20) std::fill_n(w.begin() + 7 * cols, cols, 0.0f);  // a zero row: its scales are 0
      std::vector<BlockQ8> wq(static_cast<size_t>(rows * blocks));
      for (int64_t r = 0; r < rows; ++r) quantize_row_q8(w.data() + r * cols, wq.data() + r * blocks, cols);
      const LowRankQ8 packed = pack_low_rank_q8(wq.data(), rows, cols);
      // Two input rows, added into rows 2 and 0 of a three-row y.
      constexpr int64_t kInputs = 2, kOutputs = 3;
      std::vector<BlockQ8> xq(static_cast<size_t>(kInputs * stride));
      std::vector<int32_t> sums(xq.size());
      for (int64_t t = 0; t < kInputs; ++t) {
        const std::vector<float> x = random_values(cols, 4 + static_cast<uint32_t>(t));
        quantize_row_q8(x.data(), xq.data() + t * stride, cols);
        q8_block_sums(xq.data() + t * stride, blocks, sums.data() + t * stride);
      }
      const std::vector<int32_t> which = {2, 0};
      // W's rows from the second chunk on when there is one (a tile's range).
      const int64_t r0 = rows > 8 ? 8 : 0, y_stride = rows + 3;
      const std::vector<float> y0 = random_values(kOutputs * y_stride, 5);
      const float c = 0.75f;

      std::vector<float> y_scalar = y0;
      set_kernel_level(KernelLevel::scalar);
      low_rank_add_q8(packed, xq.data(), sums.data(), stride, 2, which.data(), c, y_scalar.data(), y_stride,
                      r0, rows);
      for (int64_t yr = 0; yr < kOutputs; ++yr)
        for (int64_t r = 0; r < y_stride; ++r) {
          const double before = y0[yr * y_stride + r], got = y_scalar[yr * y_stride + r];
          if (yr == 1 || r < r0 || r >= rows) {  // no input, or outside the range: untouched
            CHECK(got == before);
            continue;
          }
          const int64_t t = yr == 2 ? 0 : 1;  // the input row added into y row yr
          double s = 0, mag = std::fabs(before);
          for (int64_t k = 0; k < cols; ++k) {
            const double p = dequantised(wq.data() + r * blocks, k) * dequantised(xq.data() + t * stride, k);
            s += p;
            mag += std::fabs(c * p);
          }
          CHECK(std::fabs(got - (before + c * s)) <= 1e-6 * mag);
        }
      for (KernelLevel k : {KernelLevel::avx2, KernelLevel::avx512}) {
        if (!kernel_level_supported(k)) {
          WARN("skipping " << kernel_level_name(k) << ": this CPU lacks it");
          continue;
        }
        set_kernel_level(k);
        std::vector<float> y = y0;
        low_rank_add_q8(packed, xq.data(), sums.data(), stride, 2, which.data(), c, y.data(), y_stride, r0,
                        rows);
        for (size_t i = 0; i < y.size(); ++i) CHECK(bits(y[i]) == bits(y_scalar[i]));
        // One row alone gives that row's bits.
        std::vector<float> one(y0.begin(), y0.begin() + rows);
        low_rank_add_q8(packed, xq.data(), sums.data(), c, one.data());
        std::vector<float> one_scalar(y0.begin(), y0.begin() + rows);
        set_kernel_level(KernelLevel::scalar);
        low_rank_add_q8(packed, xq.data(), sums.data(), c, one_scalar.data());
        for (int64_t r = 0; r < rows; ++r) CHECK(bits(one[r]) == bits(one_scalar[r]));
      }
    }
  }
  set_kernel_level(saved);
}

TEST_CASE("q8 block sums are the sums of the blocks' values at every kernel level", "[infer][quant]") {
  const KernelLevel saved = kernel_level();
  std::vector<BlockQ8> x(5);
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> value(-127, 127);
  for (BlockQ8& b : x)
    for (int8_t& q : b.q) q = static_cast<int8_t>(value(rng));
  std::fill_n(x[3].q, kQuantBlock, int8_t{-127});  // the extremes
  std::fill_n(x[4].q, kQuantBlock, int8_t{127});
  for (KernelLevel k : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(k)) continue;
    set_kernel_level(k);
    std::vector<int32_t> sums(x.size());
    q8_block_sums(x.data(), static_cast<int64_t>(x.size()), sums.data());
    for (size_t j = 0; j < x.size(); ++j) {
      int32_t expect = 0;
      for (int8_t q : x[j].q) expect += q;
      CHECK(sums[j] == expect);
    }
  }
  set_kernel_level(saved);
}
