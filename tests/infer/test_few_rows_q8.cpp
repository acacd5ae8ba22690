#include <catch2/catch.hpp>

#include <vector>

#include "core/kernel_level.h"
#include "helpers.h"
#include "infer/few_rows_q8.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"
#include "infer/weight_matrix.h"

using namespace shamn;
using shamn::test::same_bits;
using shamn::test::uniform_floats;

TEST_CASE("the few-rows int8 product gives the tiles' bits for every row of x", "[infer][quant][lora]") {
  if (!kernel_level_supported(KernelLevel::avx512)) {
    WARN("skipping: this CPU lacks AVX-512 VNNI, the only level with the few-rows product");
    return;
  }
  const KernelLevel saved = kernel_level();
  // Ranks 1 to 8; 1 to 10 blocks (past the 8 float lanes, and partial ones);
  // odd and even counts of x rows, gathered out of order.
  for (int64_t rows : {1, 3, 4, 8}) {
    for (int64_t cols : {32, 40, 64, 256, 300}) {
      for (int64_t n : {1, 2, 5, 8}) {
        INFO(rows << " x " << cols << ", " << n << " rows of x");
        const int64_t bpr = quant_blocks(cols), stride = bpr + 1;  // rows of x with a gap between them
        std::vector<float> w = uniform_floats(rows * cols, 7);
        if (rows == 3) std::fill_n(w.begin() + cols, cols, 0.0f);  // a zero row: its scales are 0
        std::vector<BlockQ8> wq(static_cast<size_t>(rows * bpr));
        for (int64_t r = 0; r < rows; ++r) quantize_row_q8(w.data() + r * cols, wq.data() + r * bpr, cols);
        std::vector<TileQ8> tiles(static_cast<size_t>(bpr));
        pack_tiles(wq.data(), rows, bpr, tiles.data());
        const FewRowsQ8 packed = pack_few_rows_q8(tiles.data(), rows, bpr);

        const int64_t x_rows = n + 2;
        std::vector<BlockQ8> xq(static_cast<size_t>(x_rows * stride));
        std::vector<int32_t> sums(xq.size());
        for (int64_t t = 0; t < x_rows; ++t) {
          const std::vector<float> x = uniform_floats(cols, 11 + t);
          quantize_row_q8(x.data(), xq.data() + t * stride, cols);
          for (int64_t j = 0; j < bpr; ++j) sums[t * stride + j] = 0;
          for (int64_t j = 0; j < bpr; ++j)
            for (int i = 0; i < kQuantBlock; ++i) sums[t * stride + j] += xq[t * stride + j].q[i];
        }
        std::vector<int32_t> order(static_cast<size_t>(n));
        for (int64_t u = 0; u < n; ++u) order[u] = static_cast<int32_t>((u * 3 + 1) % x_rows);
        const Q8Rows q{xq.data(), n, stride, nullptr, order.data(), sums.data()};

        // The tiles' batched product at the scalar level: the canonical bits.
        set_kernel_level(KernelLevel::scalar);
        const WeightMatrix a{WeightType::q8, rows, cols, 0, true, tiles.data()};
        const int64_t t_stride = rows + 2;
        std::vector<float> want(static_cast<size_t>(n * t_stride), -1.0f);
        a.dot_rows_batch(0, rows, q, want.data(), t_stride);

        set_kernel_level(KernelLevel::avx512);
        REQUIRE(few_rows_q8_available());
        std::vector<float> got(want.size(), -1.0f);
        few_rows_q8_batch(packed, q, got.data(), t_stride);
        CHECK(same_bits(got, want));  // past w.rows: untouched
      }
    }
  }
  set_kernel_level(saved);
}
