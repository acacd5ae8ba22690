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
  // block and in partial groups of 4.
  for (int64_t rows : {1, 8, 20, 256}) {
    for (int64_t cols : {1, 3, 4, 8, 13, 32, 33, 70, 256}) {
      INFO(rows << " x " << cols);
      const int64_t blocks = quant_blocks(cols);
      std::vector<float> w = random_values(rows * cols, 3);
      if (rows == 20) std::fill_n(w.begin() + 7 * cols, cols, 0.0f);  // a zero row: its scales are 0
      const std::vector<float> x = random_values(cols, 4), y0 = random_values(rows, 5);
      std::vector<BlockQ8> wq(static_cast<size_t>(rows * blocks)), xq(static_cast<size_t>(blocks));
      for (int64_t r = 0; r < rows; ++r) quantize_row_q8(w.data() + r * cols, wq.data() + r * blocks, cols);
      quantize_row_q8(x.data(), xq.data(), cols);
      const LowRankQ8 packed = pack_low_rank_q8(wq.data(), rows, cols);
      const float c = 0.75f;

      std::vector<float> y_scalar = y0;
      set_kernel_level(KernelLevel::scalar);
      low_rank_add_q8(packed, xq.data(), c, y_scalar.data());
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0, mag = std::fabs(y0[r]);
        for (int64_t k = 0; k < cols; ++k) {
          const double p = dequantised(wq.data() + r * blocks, k) * dequantised(xq.data(), k);
          s += p;
          mag += std::fabs(c * p);
        }
        CHECK(std::fabs(y_scalar[r] - (y0[r] + c * s)) <= 1e-6 * mag);
      }
      for (KernelLevel k : {KernelLevel::avx2, KernelLevel::avx512}) {
        if (!kernel_level_supported(k)) {
          WARN("skipping " << kernel_level_name(k) << ": this CPU lacks it");
          continue;
        }
        set_kernel_level(k);
        std::vector<float> y = y0;
        low_rank_add_q8(packed, xq.data(), c, y.data());
        for (int64_t r = 0; r < rows; ++r) CHECK(bits(y[r]) == bits(y_scalar[r]));
      }
    }
  }
  set_kernel_level(saved);
}
