#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace shamn {

void SamplingOptions::validate() const {
  SHAMN_INPUT_CHECK(std::isfinite(temperature) && temperature >= 0.0, "--temperature ", temperature,
                    " must be >= 0 (0 = greedy)");
  SHAMN_INPUT_CHECK(top_k >= 0, "--top-k ", top_k, " must be >= 0 (0 = no limit)");
  SHAMN_INPUT_CHECK(top_p > 0.0 && top_p <= 1.0, "--top-p ", top_p, " must be in (0, 1]");
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed, /*stream=*/0x5A) {
  options_.validate();
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  // Greedy: the first maximum (a NaN logit never wins).
  if (options_.temperature == 0.0) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (logits[v] > logits[best] || !(logits[best] == logits[best])) best = v;
    return static_cast<int32_t>(best);
  }
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  // Candidates by logit, descending; ties by lower id so the order is total.
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
  order_.resize(static_cast<size_t>(k));

  probs_.resize(order_.size());
  const double top = logits[order_[0]];
  double sum = 0.0;
  for (size_t i = 0; i < order_.size(); ++i)
    sum += probs_[i] = std::exp((static_cast<double>(logits[order_[i]]) - top) / options_.temperature);
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  size_t keep = order_.size();
  if (options_.top_p < 1.0) {
    double mass = 0.0;
    for (size_t i = 0; i < order_.size(); ++i) {
      mass += probs_[i] / sum;
      if (mass >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += probs_[i];
  double u = rng_.uniform() * kept;
  for (size_t i = 0; i < keep; ++i) {
    u -= probs_[i];
    if (u < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace shamn
