#pragma once
// Operands the kernel benchmarks share.
#include <cstdint>
#include <random>
#include <vector>

namespace shamn::bench {

// n values uniform in [-1, 1), the same for the same seed.
inline std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = u(gen);
  return v;
}

}  // namespace shamn::bench
