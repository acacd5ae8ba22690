#pragma once
// Next-token sampling as llama.cpp and Hugging Face do it: temperature, then
// top-k, then top-p (nucleus) over what is left, then a draw. The draws come
// from a Philox stream keyed by the seed, so the same seed and logits give the
// same tokens. temperature 0 is greedy (argmax, lowest id on ties).
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace shamn {

// The index of the first maximum of logits [vocab] (a NaN never wins; 0 when
// every value is NaN). Vectorised: greedy decoding calls it once per token
// over the whole vocabulary.
int32_t argmax_logit(const float* logits, int64_t vocab);

struct SamplingOptions {
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = all tokens
  double top_p = 0.95;       // 1 = no nucleus cut
  uint64_t seed = 1;
  void validate() const;  // InputError naming the flag
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // logits: [vocab]
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingOptions options_;
  Rng rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

}  // namespace shamn
