// bfloat16 rounding against an oracle that picks the nearer of the two
// neighbouring bf16 values in double arithmetic, against the CPU's own
// VCVTNEPS2BF16 where it has one, and the train.precision names.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/machine_probe_bf16.h"
#include "core/product_precision.h"
#include "core/rng.h"
#include "helpers.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SHAMN_TEST_BF16_CVT 1
#endif

using namespace shamn;

namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// The nearer of the bf16 values just below and just above |x| (ties: the one
// whose last mantissa bit is 0), for finite x whose upper neighbour is finite.
float nearest_bf16_oracle(float x) {
  const uint32_t down = bits(x) & 0xffff0000u;
  const uint32_t up = down + 0x10000u;
  if (down == bits(x)) return x;
  const double d_down = std::abs(static_cast<double>(x) - from_bits(down));
  const double d_up = std::abs(static_cast<double>(from_bits(up)) - x);
  if (d_down != d_up) return d_down < d_up ? from_bits(down) : from_bits(up);
  return (down & 0x10000u) == 0 ? from_bits(down) : from_bits(up);
}

#ifdef SHAMN_TEST_BF16_CVT
__attribute__((target("avx512f,avx512bf16"))) void hardware_round(const float* x, float* out) {
  const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x));
  alignas(32) uint16_t half[16];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(half), reinterpret_cast<__m256i>(h));
  for (int i = 0; i < 16; ++i) out[i] = from_bits(static_cast<uint32_t>(half[i]) << 16);
}
#endif

// Random finite normal floats of every exponent below the largest bf16's.
std::vector<float> random_normal_floats(int64_t n, uint64_t seed) {
  Rng rng(seed, 7);
  std::vector<float> v;
  while (static_cast<int64_t>(v.size()) < n) {
    const uint32_t u = static_cast<uint32_t>(rng.next_u64());
    const uint32_t exponent = (u >> 23) & 0xffu;
    if (exponent == 0 || exponent >= 0xfeu) continue;
    v.push_back(from_bits(u));
  }
  return v;
}

}  // namespace

TEST_CASE("round_to_bf16: ties to even, specials, overflow", "[core][bf16]") {
  const float ulp = std::ldexp(1.0f, -7);  // of bf16 at 1
  CHECK(round_to_bf16(1.0f) == 1.0f);
  CHECK(round_to_bf16(1.0f + ulp / 2) == 1.0f);                                // tie: even (mantissa 0)
  CHECK(round_to_bf16(1.0f + 3 * ulp / 2) == 1.0f + 2 * ulp);                  // tie: even (mantissa 2)
  CHECK(round_to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)) == 1.0f + ulp);  // above the tie
  CHECK(round_to_bf16(-(1.0f + 3 * ulp / 2)) == -(1.0f + 2 * ulp));
  CHECK(std::signbit(round_to_bf16(-0.0f)));
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::infinity())));
  CHECK(round_to_bf16(std::numeric_limits<float>::max()) == std::numeric_limits<float>::infinity());
  CHECK(round_to_bf16(from_bits(0x7f7f0000u)) == from_bits(0x7f7f0000u));  // the largest bf16
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(round_to_bf16(from_bits(0x7f800001u))));  // a NaN that rounding would make infinite
}

TEST_CASE("round_to_bf16 picks the nearer bf16 neighbour", "[core][bf16]") {
  for (float x : random_normal_floats(200000, 11)) {
    const float r = round_to_bf16(x);
    INFO("x bits " << bits(x));
    CHECK((bits(r) & 0xffffu) == 0);
    REQUIRE(bits(r) == bits(nearest_bf16_oracle(x)));
  }
}

TEST_CASE("round_to_bf16 equals the CPU's VCVTNEPS2BF16", "[core][bf16]") {
#ifdef SHAMN_TEST_BF16_CVT
  if (!bf16_dot_supported()) {
    WARN("this CPU has no AVX512_BF16: the hardware comparison is skipped");
    return;
  }
  const std::vector<float> x = random_normal_floats(16 * 20000, 12);
  float hw[16];
  for (size_t i = 0; i < x.size(); i += 16) {
    hardware_round(&x[i], hw);
    for (int l = 0; l < 16; ++l) REQUIRE(bits(hw[l]) == bits(round_to_bf16(x[i + l])));
  }
#else
  WARN("not an x86-64 build: the hardware comparison is skipped");
#endif
}

TEST_CASE("round_to_bf16 over an array: any thread count, in place", "[core][bf16]") {
  test::ThreadCountGuard guard;
  const std::vector<float> x = random_normal_floats(300001, 13);
  const auto n = static_cast<int64_t>(x.size());
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> out(x.size()), in_place = x;
    round_to_bf16(out.data(), x.data(), n);
    round_to_bf16(in_place.data(), in_place.data(), n);
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE(bits(out[i]) == bits(round_to_bf16(x[i])));
      REQUIRE(bits(in_place[i]) == bits(out[i]));
    }
  }
}

TEST_CASE("product precision names", "[core][bf16]") {
  CHECK(product_precision_from_string("bf16", "train.precision") == ProductPrecision::bf16);
  CHECK(product_precision_from_string("f32", "train.precision") == ProductPrecision::f32);
  CHECK_THROWS_WITH(product_precision_from_string("fp16", "train.precision"),
                    Catch::Contains("train.precision") && Catch::Contains("fp16"));
  CHECK(product_precision() == ProductPrecision::f32);  // the default
  {
    const ScopedProductPrecision scope(ProductPrecision::bf16);
    CHECK(product_precision() == ProductPrecision::bf16);
  }
  CHECK(product_precision() == ProductPrecision::f32);
}
