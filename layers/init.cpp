#include "layers/init.h"

namespace shamn {

Rng tensor_rng(uint64_t seed, const std::string& full_name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : full_name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return Rng(seed, h);
}

std::optional<InitScheme> parse_init_scheme(const std::string& name) {
  if (name == "normal") return InitScheme::normal;
  if (name == "fan_in") return InitScheme::fan_in;
  return std::nullopt;
}

void init_normal(Tensor& t, uint64_t seed, const std::string& full_name, double stddev) {
  Rng rng = tensor_rng(seed, full_name);
  rng.fill_normal(t, 0.0, stddev);
}

void init_uniform(Tensor& t, uint64_t seed, const std::string& full_name, double bound) {
  Rng rng = tensor_rng(seed, full_name);
  rng.fill_uniform(t, -bound, bound);
}

}  // namespace shamn
