#pragma once
// Parameter initialisation (the scheme is documented in layers/README.md).
#include <cstdint>
#include <optional>
#include <string>

#include "core/rng.h"
#include "core/tensor.h"

namespace shamn {

// The RNG stream of one tensor: seeded by the run's seed, stream = FNV-1a hash
// of its full dotted name.
Rng tensor_rng(uint64_t seed, const std::string& full_name);

// How a fresh model's weight matrices are drawn (train.init; the table in
// layers/README.md gives each tensor's rule under both schemes).
enum class InitScheme {
  normal,  // every weight matrix N(0, std^2), as GPT-2 and the PyTorch reference do
  fan_in,  // each layer's own fan-in rule (shamn's default before stop 70)
};

struct WeightInit {
  InitScheme scheme = InitScheme::normal;
  double std = 0.02;  // normal: the std of every weight matrix
  // normal: the residual branches' output projections (mixer.out, the experts'
  // down) at std / sqrt(2L), as GPT-2 (fan_in scales them so always).
  bool scale_residual = false;
  // A weight's std: `std` under normal (times residual_scale, the layer's
  // 1/sqrt(2L) or 1, when scale_residual), the layer's fan-in rule under fan_in.
  double pick(double fan_in_std, double residual_scale = 1.0) const {
    if (scheme == InitScheme::fan_in) return fan_in_std;
    return scale_residual ? std * residual_scale : std;
  }
};

// "normal" or "fan_in"; anything else is nullopt.
std::optional<InitScheme> parse_init_scheme(const std::string& name);

void init_normal(Tensor& t, uint64_t seed, const std::string& full_name, double stddev);
void init_uniform(Tensor& t, uint64_t seed, const std::string& full_name, double bound);

}  // namespace shamn
