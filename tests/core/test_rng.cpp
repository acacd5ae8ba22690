#include <catch2/catch.hpp>

#include <cmath>

#include "core/parallel.h"
#include "core/rng.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[core][rng]") {
  const auto zero = philox4x32(0, 0, 0);
  CHECK(zero == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  const auto ones = philox4x32(~0ull, ~0ull, ~0ull);
  CHECK(ones == std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
}

TEST_CASE("rng streams are reproducible and state is (seed, stream, offset)", "[core][rng]") {
  Rng a(42, 3), b(42, 3), c(43, 3), d(42, 4);
  const uint64_t x = a.next_u64();
  CHECK(x == b.next_u64());
  CHECK(x != c.next_u64());
  CHECK(x != d.next_u64());
  CHECK(a.offset() == 1);
  Rng resumed(42, 3);
  resumed.set_offset(a.offset());
  CHECK(a.next_u64() == resumed.next_u64());
}

TEST_CASE("tensor fills do not depend on the thread count", "[core][rng]") {
  test::ThreadCountGuard guard;
  Tensor one = Tensor::empty({100003});
  Tensor two = Tensor::empty({100003});
  set_num_threads(1);
  Rng r1(7);
  r1.fill_normal(one, 0, 1);
  set_num_threads(2);
  Rng r2(7);
  r2.fill_normal(two, 0, 1);
  CHECK(bitwise_equal(one, two));
  CHECK(r1.offset() == r2.offset());
  CHECK(r1.offset() == (100003 + 3) / 4);
}

TEST_CASE("uniform and normal have the right moments", "[core][rng]") {
  Tensor u = Tensor::empty({200000}, DType::f64);
  Rng rng(1);
  rng.fill_uniform(u, -2.0, 4.0);
  const auto uv = u.vector<double>();
  CHECK(uv.minCoeff() >= -2.0);
  CHECK(uv.maxCoeff() < 4.0);
  CHECK(uv.mean() == Approx(1.0).margin(0.02));

  Tensor n = Tensor::empty({200000}, DType::f64);
  rng.fill_normal(n, 3.0, 0.5);
  const auto nv = n.vector<double>();
  const double mean = nv.mean();
  const double var = (nv.array() - mean).square().mean();
  CHECK(mean == Approx(3.0).margin(0.01));
  CHECK(std::sqrt(var) == Approx(0.5).margin(0.01));

  std::array<int, 7> counts{};
  for (int i = 0; i < 70000; ++i) ++counts[rng.below(7)];
  for (int c : counts) CHECK(c == Approx(10000).margin(500));
  CHECK_THROWS_AS(rng.below(0), Error);
}
