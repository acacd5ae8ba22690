// The RMSNorm kernels against the formula in double, and the backward's one-pass
// form (dx and dgain together) against its two passes.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/kernels/rms_norm.h"
#include "core/parallel.h"
#include "helpers.h"

using namespace shamn;

using test::same_bits;
using test::uniform_floats;

TEST_CASE("rms_norm backward: dx and dgain in one pass equal the two passes and the formula",
          "[core][rms_norm][determinism]") {
  test::ThreadCountGuard guard;
  constexpr int64_t dim = 96;
  // 64 rows is one partial of the column sum (two passes then); more rows fuse.
  for (int64_t rows : {3, 64, 65, 300})
    for (int threads : {1, 2}) {
      DYNAMIC_SECTION("rows " << rows << " threads " << threads) {
        set_num_threads(threads);
        const std::vector<float> x = uniform_floats(rows * dim, 1), dy = uniform_floats(rows * dim, 2),
                                 gain = uniform_floats(dim, 3);
        std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows));
        rms_norm_forward(y.data(), rstd.data(), x.data(), gain.data(), rows, dim, 1e-5f);

        std::vector<float> dx(x.size(), 0.5f), dgain(dim, 0.25f);
        rms_norm_backward(dx.data(), dgain.data(), dy.data(), x.data(), gain.data(), rstd.data(), rows, dim);
        std::vector<float> dx_alone(x.size(), 0.5f), dgain_alone(dim, 0.25f);
        rms_norm_backward<float>(dx_alone.data(), nullptr, dy.data(), x.data(), gain.data(), rstd.data(),
                                 rows, dim);
        rms_norm_backward<float>(nullptr, dgain_alone.data(), dy.data(), x.data(), gain.data(), rstd.data(),
                                 rows, dim);
        CHECK(same_bits(dx, dx_alone));
        CHECK(same_bits(dgain, dgain_alone));

        std::vector<double> dgain_ref(dim, 0.25);
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0, dot = 0;
          for (int64_t i = 0; i < dim; ++i) {
            ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
            dot += static_cast<double>(gain[i]) * dy[r * dim + i] * x[r * dim + i];
          }
          const double s = 1.0 / std::sqrt(ss / dim + 1e-5);
          for (int64_t i = 0; i < dim; ++i) {
            const double want = 0.5 + s * gain[i] * dy[r * dim + i] - s * s * s * dot / dim * x[r * dim + i];
            CHECK(dx[r * dim + i] == Approx(want).margin(1e-5));
            dgain_ref[i] += static_cast<double>(dy[r * dim + i]) * x[r * dim + i] * s;
          }
        }
        for (int64_t i = 0; i < dim; ++i) CHECK(dgain[i] == Approx(dgain_ref[i]).margin(1e-4));
      }
    }
}

TEST_CASE("rms_norm forward: rows normalised four at a time equal one row at a time",
          "[core][rms_norm][determinism]") {
  test::ThreadCountGuard guard;
  // Row by row, as the runtime normalises a decode step's one row: square i
  // into lane i % 16, then the lanes left to right (written out here, not
  // lane_sum or rows_sum_squares, so that a lane moved there fails).
  const auto one_row = [](const float* xr, const float* gain, int64_t dim, float* yr, float& rstd) {
    float lanes[16] = {};
    for (int64_t i = 0; i < dim; ++i) lanes[i % 16] += xr[i] * xr[i];
    float ss = lanes[0];
    for (int l = 1; l < 16; ++l) ss += lanes[l];
    rstd = 1.0f / std::sqrt(ss / static_cast<float>(dim) + 1e-5f);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * rstd * gain[i];
  };
  for (int64_t dim : {512, 61})
    for (int64_t rows : {1, 4, 7, 9, 130})
      for (int threads : {1, 2}) {
        DYNAMIC_SECTION("dim " << dim << " rows " << rows << " threads " << threads) {
          set_num_threads(threads);
          const std::vector<float> x = uniform_floats(rows * dim, 4), gain = uniform_floats(dim, 5);
          std::vector<float> y(x.size()), rstd(static_cast<size_t>(rows)), want_y(x.size()),
              want_rstd(rstd.size());
          rms_norm_forward(y.data(), rstd.data(), x.data(), gain.data(), rows, dim, 1e-5f);
          for (int64_t r = 0; r < rows; ++r)
            one_row(x.data() + r * dim, gain.data(), dim, want_y.data() + r * dim, want_rstd[r]);
          CHECK(same_bits(y, want_y));
          CHECK(same_bits(rstd, want_rstd));
        }
      }
}
