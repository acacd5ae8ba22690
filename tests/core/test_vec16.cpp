// The 16-lane helpers the fused kernels rely on: exp accuracy and its edge lanes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/vec16.h"

using namespace shamn;

TEST_CASE("vec16::exp is within 2 ulp of exp over the softmax range", "[kernels][vec16]") {
  double worst = 0.0;
  for (int k = 0; k < 200000; ++k) {
    vec16::F x;
    for (int i = 0; i < vec16::kLanes; ++i)
      x[i] = -86.0f + 174.0f * static_cast<float>(k * vec16::kLanes + i) / (200000.0f * 16.0f);
    const vec16::F y = vec16::exp(x);
    for (int i = 0; i < vec16::kLanes; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst = std::max(worst, std::abs(y[i] - want) / ulp);
    }
  }
  INFO("worst error " << worst << " ulp");
  CHECK(worst <= 2.0);
}

TEST_CASE("vec16::exp underflows to zero and propagates NaN", "[kernels][vec16]") {
  vec16::F x = vec16::splat(0.0f);
  x[0] = -87.5f;
  x[1] = -std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN();
  x[3] = -1e30f;
  const vec16::F y = vec16::exp(x);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 0.0f);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.0f);
  CHECK(y[4] == 1.0f);
  CHECK(vec16::dot(std::vector<float>(37, 2.0f).data(), std::vector<float>(37, 0.5f).data(), 37) == 37.0f);
}

TEST_CASE("vec16::sum16 sums each input into its own lane", "[kernels][vec16]") {
  vec16::F v[vec16::kLanes];
  for (int i = 0; i < vec16::kLanes; ++i)
    for (int l = 0; l < vec16::kLanes; ++l) v[i][l] = static_cast<float>((i + 1) * 100 + l);
  const vec16::F r = vec16::sum16(v);
  for (int i = 0; i < vec16::kLanes; ++i) {
    INFO("lane " << i);
    CHECK(r[i] == static_cast<float>(16 * (i + 1) * 100 + 120));
  }
}
