// The vectorised float activations against the scalar double formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kernel_level.h"
#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("fast gelu, silu, sigmoid and their derivatives match the formulas", "[core][activation]") {
  for (int64_t n : {1, 7, 16, 31, 33, 1000}) {
    std::vector<float> x(n), y(n), dx(n, 0.5f), dy(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = -12.0f + 24.0f * static_cast<float>(i) / static_cast<float>(std::max<int64_t>(1, n - 1));
      dy[i] = 1.0f + 0.001f * static_cast<float>(i);
    }
    auto check = [&](const char* what, auto value, auto slope) {
      INFO(what << " n=" << n);
      for (int64_t i = 0; i < n; ++i) {
        const double xi = x[i];
        CHECK(y[i] == Approx(value(xi)).epsilon(2e-6).margin(1e-7));
        CHECK(dx[i] == Approx(0.5 + dy[i] * slope(xi)).epsilon(2e-6).margin(2e-7));
      }
    };
    gelu_forward(y.data(), x.data(), n);
    gelu_backward(dx.data(), dy.data(), x.data(), n);
    check("gelu", Gelu<double>::forward, Gelu<double>::derivative);
    std::fill(dx.begin(), dx.end(), 0.5f);
    silu_forward(y.data(), x.data(), n);
    silu_backward(dx.data(), dy.data(), x.data(), n);
    check("silu", Silu<double>::forward, Silu<double>::derivative);
    std::fill(dx.begin(), dx.end(), 0.5f);
    sigmoid_forward(y.data(), x.data(), n);
    sigmoid_backward(dx.data(), dy.data(), y.data(), n);
    check(
        "sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); },
        [](double v) {
          const double s = 1 / (1 + std::exp(-v));
          return s * (1 - s);
        });
  }
}

TEST_CASE("gelu and silu backward with overwrite write what adding into zeros gives, in place too",
          "[core][activation]") {
  for (int64_t n : {5, 16, 67, 5000}) {
    std::vector<float> x(n), dy(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = -6.0f + 0.37f * static_cast<float>(i % 31);
      dy[i] = 0.5f - 0.013f * static_cast<float>(i % 77);
    }
    for (bool gelu : {true, false}) {
      INFO((gelu ? "gelu" : "silu") << " n=" << n);
      const auto backward = [&](float* dx, const float* g, bool overwrite) {
        if (gelu)
          gelu_backward(dx, g, x.data(), n, overwrite);
        else
          silu_backward(dx, g, x.data(), n, overwrite);
      };
      std::vector<float> added(n, 0.0f), written(n, std::numeric_limits<float>::quiet_NaN()), in_place = dy;
      backward(added.data(), dy.data(), false);
      backward(written.data(), dy.data(), true);
      backward(in_place.data(), in_place.data(), true);
      // 0 + g and g differ only in the sign of a zero.
      for (int64_t i = 0; i < n; ++i) CHECK(written[i] == added[i]);
      CHECK(test::same_bits(written, in_place));
      std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), add_d(n, 0.0),
          write_d(n, std::numeric_limits<double>::quiet_NaN());
      if (gelu) {
        gelu_backward(add_d.data(), dyd.data(), xd.data(), n);
        gelu_backward(write_d.data(), dyd.data(), xd.data(), n, true);
      } else {
        silu_backward(add_d.data(), dyd.data(), xd.data(), n);
        silu_backward(write_d.data(), dyd.data(), xd.data(), n, true);
      }
      CHECK(write_d == add_d);
    }
  }
}

TEST_CASE("gelu and silu forward and backward in one pass give the bits of the two passes",
          "[core][activation]") {
  // The block-sparse backward takes act(x) and act'(x) from one pass; it must
  // give what the two passes give, adding and writing, in place too, at every
  // kernel level (the compiler contracts the two alike only where they are
  // written alike). 67: a partial last block; 5,000: many tasks.
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    const ScopedKernelLevel scoped(level);
    for (int64_t n : {5, 67, 5000})
      for (bool gelu : {true, false})
        for (bool overwrite : {false, true}) {
          INFO(kernel_level_name(level)
               << (gelu ? " gelu" : " silu") << " n=" << n << " overwrite " << overwrite);
          const std::vector<float> x = test::uniform_floats(n, 81), dy = test::uniform_floats(n, 82),
                                   dx0 = test::uniform_floats(n, 83);
          std::vector<float> y_two(n), y_one(n), dx_two = dx0, dx_one = dx0, in_place = dy;
          std::vector<float> y_in_place(n);
          if (gelu) {
            gelu_forward(y_two.data(), x.data(), n);
            gelu_backward(dx_two.data(), dy.data(), x.data(), n, overwrite);
            gelu_forward_backward(y_one.data(), dx_one.data(), dy.data(), x.data(), n, overwrite);
            gelu_forward_backward(y_in_place.data(), in_place.data(), in_place.data(), x.data(), n, true);
          } else {
            silu_forward(y_two.data(), x.data(), n);
            silu_backward(dx_two.data(), dy.data(), x.data(), n, overwrite);
            silu_forward_backward(y_one.data(), dx_one.data(), dy.data(), x.data(), n, overwrite);
            silu_forward_backward(y_in_place.data(), in_place.data(), in_place.data(), x.data(), n, true);
          }
          CHECK(test::same_bits(y_one, y_two));
          CHECK(test::same_bits(dx_one, dx_two));
          CHECK(test::same_bits(y_in_place, y_two));
          if (overwrite) CHECK(test::same_bits(in_place, dx_two));
        }
  }
}
