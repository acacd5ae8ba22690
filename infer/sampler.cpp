#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "core/simd.h"

namespace shamn {

void SamplingOptions::validate() const {
  SHAMN_INPUT_CHECK(std::isfinite(temperature) && temperature >= 0.0, "--temperature ", temperature,
                    " must be >= 0 (0 = greedy)");
  SHAMN_INPUT_CHECK(top_k >= 0, "--top-k ", top_k, " must be >= 0 (0 = no limit)");
  SHAMN_INPUT_CHECK(top_p > 0.0 && top_p <= 1.0, "--top-p ", top_p, " must be in (0, 1]");
}

namespace {

int32_t argmax_scalar(const float* logits, int64_t begin, int64_t end, int64_t best) {
  for (int64_t v = begin; v < end; ++v)
    if (logits[v] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[v]))) best = v;
  return static_cast<int32_t>(best);
}

}  // namespace

int32_t argmax_logit(const float* logits, int64_t vocab) {
  // Sixteen lanes as two halves of eight (simd::F8): the baseline compares eight
  // floats in one instruction, and the loop carries four registers.
  using simd::F8;
  using simd::I8;
  constexpr int kHalf = 8, kLanes = 2 * kHalf;
  const int64_t full = vocab / kLanes * kLanes;
  if (full == 0) return argmax_scalar(logits, 1, vocab, 0);
  // Per lane: the largest value so far and its first index (strict >, so a
  // later equal value or a NaN never replaces it).
  F8 best[2];
  I8 index[2], next[2];
  for (int h = 0; h < 2; ++h) {
    std::memcpy(&best[h], logits + h * kHalf, sizeof(F8));
    for (int i = 0; i < kHalf; ++i) index[h][i] = h * kHalf + i;
    next[h] = index[h] + kLanes;
  }
  for (int64_t v = kLanes; v < full; v += kLanes) {
    for (int h = 0; h < 2; ++h) {
      F8 x;
      std::memcpy(&x, logits + v + h * kHalf, sizeof(F8));
      const I8 gt = x > best[h];
      best[h] = gt ? x : best[h];
      index[h] = gt ? next[h] : index[h];
      next[h] += kLanes;
    }
  }
  // A lane that started on a NaN never moved: then the scalar scan decides.
  int64_t pick = -1;
  for (int i = 0; i < kLanes; ++i) {
    const float b = best[i / kHalf][i % kHalf];
    const int64_t at = index[i / kHalf][i % kHalf];
    if (std::isnan(b)) return argmax_scalar(logits, 1, vocab, 0);
    if (pick < 0 || b > logits[pick] || (b == logits[pick] && at < pick)) pick = at;
  }
  return argmax_scalar(logits, full, vocab, pick);
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed, /*stream=*/0x5A) {
  options_.validate();
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  // Greedy: the first maximum (a NaN logit never wins).
  if (options_.temperature == 0.0) return argmax_logit(logits, vocab);
  distribution(logits, vocab, scratch_);
  return draw(scratch_);
}

void Sampler::distribution(const float* logits, int64_t vocab, TokenDistribution& out) const {
  std::vector<int32_t>& order = out.tokens;
  std::vector<double>& probs = out.weights;
  if (options_.temperature == 0.0) {
    order.assign(1, argmax_logit(logits, vocab));
    probs.assign(1, 1.0);
    out.total = 1.0;
    return;
  }
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  // Candidates by logit, descending; ties by lower id so the order is total.
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  order.resize(static_cast<size_t>(k));

  probs.resize(order.size());
  const double top = logits[order[0]];
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i)
    sum += probs[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / options_.temperature);
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  size_t keep = order.size();
  if (options_.top_p < 1.0) {
    double mass = 0.0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += probs[i] / sum;
      if (mass >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  order.resize(keep);
  probs.resize(keep);
  out.total = 0.0;
  for (size_t i = 0; i < keep; ++i) out.total += probs[i];
}

int32_t Sampler::draw(const TokenDistribution& d) {
  double u = rng_.uniform() * d.total;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    u -= d.weights[i];
    if (u < 0.0) return d.tokens[i];
  }
  return d.tokens.back();
}

}  // namespace shamn
