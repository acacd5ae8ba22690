#include "core/rng.h"

#include <cmath>
#include <numbers>

#include "core/parallel.h"

namespace shamn {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t stream, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

namespace {
// 24 random bits -> [0, 1) and (0, 1]: exact in float and double.
inline double unit_open_high(uint32_t u) { return (u >> 8) * 0x1.0p-24; }
inline double unit_open_low(uint32_t u) { return ((u >> 8) + 1) * 0x1.0p-24; }

// Box-Muller on two words -> two standard normals.
inline std::array<double, 2> box_muller(uint32_t a, uint32_t b) {
  const double r = std::sqrt(-2.0 * std::log(unit_open_low(a)));
  const double theta = 2.0 * std::numbers::pi * unit_open_high(b);
  return {r * std::cos(theta), r * std::sin(theta)};
}

template <class T, class Gen>
void fill_blocks(Tensor& t, uint64_t first_block, uint64_t stream, uint64_t seed, Gen&& gen) {
  T* p = t.data<T>();
  const int64_t n = t.numel();
  const int64_t blocks = (n + 3) / 4;
  parallel_for(0, blocks, 1024, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const auto words = philox4x32(first_block + static_cast<uint64_t>(b), stream, seed);
      const std::array<double, 4> v = gen(words);
      for (int64_t j = 0; j < 4 && 4 * b + j < n; ++j) p[4 * b + j] = static_cast<T>(v[j]);
    }
  });
}
}  // namespace

uint64_t Rng::next_u64() {
  const auto w = next_block();
  return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t n) {
  SHAMN_CHECK(n > 0, "Rng::below(0)");
  // Rejection keeps every value equally likely (Lemire's threshold).
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t x = next_u64();
    if (x >= threshold) return x % n;
  }
}

double Rng::normal(double mean, double stddev) {
  const auto w = next_block();
  return mean + stddev * box_muller(w[0], w[1])[0];
}

void Rng::fill_uniform(Tensor& t, double lo, double hi) {
  const auto gen = [lo, hi](const std::array<uint32_t, 4>& w) {
    std::array<double, 4> v;
    for (int j = 0; j < 4; ++j) v[j] = lo + (hi - lo) * unit_open_high(w[j]);
    return v;
  };
  if (t.dtype() == DType::f64)
    fill_blocks<double>(t, offset_, stream_, seed_, gen);
  else
    fill_blocks<float>(t, offset_, stream_, seed_, gen);
  offset_ += static_cast<uint64_t>((t.numel() + 3) / 4);
}

void Rng::fill_normal(Tensor& t, double mean, double stddev) {
  const auto gen = [mean, stddev](const std::array<uint32_t, 4>& w) {
    const auto a = box_muller(w[0], w[1]);
    const auto b = box_muller(w[2], w[3]);
    return std::array<double, 4>{mean + stddev * a[0], mean + stddev * a[1], mean + stddev * b[0],
                                 mean + stddev * b[1]};
  };
  if (t.dtype() == DType::f64)
    fill_blocks<double>(t, offset_, stream_, seed_, gen);
  else
    fill_blocks<float>(t, offset_, stream_, seed_, gen);
  offset_ += static_cast<uint64_t>((t.numel() + 3) / 4);
}

}  // namespace shamn
