// The 16-lane helpers the fused kernels rely on: exp accuracy and its edge lanes,
// the horizontal sums and the dot product.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/simd.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("simd::exp is within 2 ulp of exp over the softmax range", "[kernels][simd]") {
  double worst = 0.0;
  for (int k = 0; k < 200000; ++k) {
    simd::F x;
    for (int i = 0; i < simd::kLanes; ++i)
      x[i] = -86.0f + 174.0f * static_cast<float>(k * simd::kLanes + i) / (200000.0f * 16.0f);
    const simd::F y = simd::exp(x);
    for (int i = 0; i < simd::kLanes; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst = test::worse(worst, std::abs(y[i] - want) / ulp);
    }
  }
  INFO("worst error " << worst << " ulp");
  CHECK(worst <= 2.0);
}

TEST_CASE("simd::exp underflows to zero, overflows to inf and propagates NaN", "[kernels][simd]") {
  simd::F x = simd::splat(0.0f);
  x[0] = -105.0f;
  x[1] = -std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN();
  x[3] = -1e30f;
  const simd::F y = simd::exp(x);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 0.0f);
  CHECK(std::isnan(y[2]));
  CHECK(y[3] == 0.0f);
  CHECK(y[4] == 1.0f);
  x[5] = 89.0f;
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -87.5f;
  const simd::F z = simd::exp(x);
  CHECK(std::isinf(z[5]));
  CHECK(std::isinf(z[6]));
  CHECK(z[7] >= 0.0f);
  CHECK(z[7] < 1.2e-38f);
}

TEST_CASE("simd::exp2 is within 2 ulp of 2^y over normal results, exact at integers", "[kernels][simd]") {
  double worst = 0.0;
  for (int k = 0; k < 200000; ++k) {
    simd::F y;
    for (int i = 0; i < simd::kLanes; ++i)
      y[i] = -126.0f + 253.9f * static_cast<float>(k * simd::kLanes + i) / (200000.0f * 16.0f);
    const simd::F p = simd::exp2(y);
    for (int i = 0; i < simd::kLanes; ++i) {
      const double want = std::exp2(static_cast<double>(y[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst = test::worse(worst, std::abs(p[i] - want) / ulp);
    }
  }
  INFO("worst error " << worst << " ulp");
  CHECK(worst <= 2.0);
  for (int e = -149; e <= 127; e += 16) {
    simd::F y;
    for (int i = 0; i < simd::kLanes; ++i) y[i] = static_cast<float>(std::min(127, e + i));
    const simd::F p = simd::exp2(y);
    for (int i = 0; i < simd::kLanes; ++i) CHECK(p[i] == std::ldexp(1.0f, static_cast<int>(y[i])));
  }
}

TEST_CASE("simd::exp2 underflows to zero, overflows to inf and propagates NaN", "[kernels][simd]") {
  simd::F y = simd::splat(0.0f);
  y[0] = -151.0f;
  y[1] = -std::numeric_limits<float>::infinity();
  y[2] = std::numeric_limits<float>::quiet_NaN();
  y[3] = -1e30f;
  y[5] = 128.0f;
  y[6] = std::numeric_limits<float>::infinity();
  y[7] = -149.0f;
  y[8] = -130.5f;  // a denormal
  const simd::F p = simd::exp2(y);
  CHECK(p[0] == 0.0f);
  CHECK(p[1] == 0.0f);
  CHECK(std::isnan(p[2]));
  CHECK(p[3] == 0.0f);
  CHECK(p[4] == 1.0f);
  CHECK(std::isinf(p[5]));
  CHECK(std::isinf(p[6]));
  CHECK(p[7] == std::numeric_limits<float>::denorm_min());
  CHECK(p[8] == Approx(std::exp2(-130.5)).epsilon(1e-5));
}

TEST_CASE("simd::sum16 sums each input into its own lane", "[kernels][simd]") {
  simd::F v[simd::kLanes];
  for (int i = 0; i < simd::kLanes; ++i)
    for (int l = 0; l < simd::kLanes; ++l) v[i][l] = static_cast<float>((i + 1) * 100 + l);
  const simd::F r = simd::sum16(v);
  for (int i = 0; i < simd::kLanes; ++i) {
    INFO("lane " << i);
    CHECK(r[i] == static_cast<float>(16 * (i + 1) * 100 + 120));
  }
}

TEST_CASE("simd::dot covers the vector body and the scalar tail", "[kernels][simd]") {
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{16}, int64_t{64}, int64_t{101}}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    double want = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
      b[static_cast<size_t>(i)] = static_cast<float>(i % 5) * 0.5f;
      want += static_cast<double>(a[static_cast<size_t>(i)]) * b[static_cast<size_t>(i)];
    }
    CHECK(simd::dot(a.data(), b.data(), n) == static_cast<float>(want));
  }
}
