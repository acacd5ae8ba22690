// The vectorised float activations against the scalar double formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"

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
