#pragma once
// Parameter initialisation (the scheme is documented in layers/README.md).
#include <cstdint>
#include <string>

#include "core/rng.h"
#include "core/tensor.h"

namespace shamn {

// The RNG stream of one tensor: seeded by the run's seed, stream = FNV-1a hash
// of its full dotted name.
Rng tensor_rng(uint64_t seed, const std::string& full_name);

void init_normal(Tensor& t, uint64_t seed, const std::string& full_name, double stddev);
void init_uniform(Tensor& t, uint64_t seed, const std::string& full_name, double bound);

}  // namespace shamn
