#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "core/check.h"
#include "core/simd.h"

namespace shamn {

void SamplingOptions::validate() const {
  SHAMN_INPUT_CHECK(std::isfinite(temperature) && temperature >= 0.0, "--temperature ", temperature,
                    " must be >= 0 (0 = greedy)");
  SHAMN_INPUT_CHECK(top_k >= 0, "--top-k ", top_k, " must be >= 0 (0 = no limit)");
  SHAMN_INPUT_CHECK(top_p > 0.0 && top_p <= 1.0, "--top-p ", top_p, " must be in (0, 1]");
  SHAMN_INPUT_CHECK(frequency_penalty >= -2.0 && frequency_penalty <= 2.0, "--frequency-penalty ",
                    frequency_penalty, " must be in [-2, 2]");
  SHAMN_INPUT_CHECK(presence_penalty >= -2.0 && presence_penalty <= 2.0, "--presence-penalty ",
                    presence_penalty, " must be in [-2, 2]");
  std::vector<int32_t> tokens;
  for (const auto& [token, bias] : logit_bias) {
    SHAMN_INPUT_CHECK(token >= 0 && std::abs(bias) <= kLogitBiasLimit, "--logit-bias ", token, "=", bias,
                      ": the token must be >= 0 and the bias in [-100, 100]");
    tokens.push_back(token);
  }
  std::sort(tokens.begin(), tokens.end());
  const auto twice = std::adjacent_find(tokens.begin(), tokens.end());
  SHAMN_INPUT_CHECK(twice == tokens.end(), "--logit-bias names token ", twice == tokens.end() ? 0 : *twice,
                    " twice");
}

void SamplingOptions::check_vocabulary(int64_t vocab) const {
  for (const auto& [token, bias] : logit_bias)
    SHAMN_INPUT_CHECK(token < vocab, "--logit-bias names token ", token,
                      ", outside the model's vocabulary [0, ", vocab, ")");
}

namespace {

int32_t argmax_scalar(const float* logits, int64_t begin, int64_t end, int64_t best) {
  for (int64_t v = begin; v < end; ++v)
    if (logits[v] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[v]))) best = v;
  return static_cast<int32_t>(best);
}

// top_k_tokens from k <= vocab / kSelectFraction; above, keeping most of the
// vocabulary costs more than sorting it (sorted_tokens).
constexpr int64_t kSelectFraction = 8;

// A token's rank among the candidates: higher logit first, then lower id (a
// total order on non-NaN logits).
struct Candidate {
  float logit;
  int32_t id;
};
bool likelier(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// A floor for top_k_tokens' bar, never above the k-th largest logit: the logits
// are dealt in turn to G groups (8 lanes of G / 8 vectors, G about 2k), and the
// k-th largest of the groups' maxima, G distinct tokens, has at least k tokens at
// or above it. With about 2k groups the floor sits near the k-th largest logit,
// so the scan offers little more than the k, where a bar that starts at the
// first k tokens' least offered several times as many, each a mispredicted
// branch and some an nth_element cut (experiments/serving.md, stop 51: 1.9x a
// draw in BM_sample_rows, whose 64 streams' logits neither stay in cache nor
// teach the branch predictor the next draw). NaN logits are never a group's
// maximum. -inf where it would not pay (small vocabularies, k over 128).
float group_max_floor(const float* logits, int64_t vocab, int64_t k) {
  using simd::F8;
  using simd::I8;
  constexpr int64_t kMaxVectors = 16;  // AVX2's 16 registers
  if ((k + 7) / 8 > kMaxVectors) return -INFINITY;
  const int64_t vectors = std::min(kMaxVectors, 2 * ((k + 7) / 8)), block = 8 * vectors;
  if (vocab < 32 * block) return -INFINITY;
  F8 group_max[kMaxVectors];
  for (F8& m : group_max) m = F8{} - INFINITY;
  for (int64_t v = 0; v + block <= vocab; v += block)
    for (int64_t g = 0; g < vectors; ++g) {
      F8 x;
      std::memcpy(&x, logits + v + 8 * g, sizeof(F8));
      const I8 above = x > group_max[g];
      group_max[g] = above ? x : group_max[g];
    }
  float maxima[8 * kMaxVectors];
  std::memcpy(maxima, group_max, sizeof(float) * static_cast<size_t>(block));
  std::nth_element(maxima, maxima + (k - 1), maxima + block, std::greater<float>());
  return maxima[k - 1];
}

// The k likeliest tokens of logits [vocab] in `order`, likeliest first: the
// first k of std::partial_sort by likelier, which the sampler used before (a
// heap over every id, reading the logits indirectly: 35-60 us a stream at V =
// 32,000, k = 40; experiments/serving.md). One pass over the logits keeps
// `kept`: at least the k likeliest so far, and a bar, the logit of the k-th
// likeliest when `kept` was last cut to k. Sixteen logits at a time are
// compared with the bar and only those above it are kept (one equal to the bar
// has a higher id than every kept token, so it is not among the k): on a
// shuffled vocabulary about k ln(V / k) of them. At 2k kept, nth_element cuts
// back to the best k and raises the bar. NaN logits are never candidates.
void top_k_tokens(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>& order,
                  std::vector<Candidate>& kept) {
  using simd::F8;
  using simd::I8;
  constexpr int64_t kLanes = 16;
  kept.clear();
  const auto cut = [&] {  // the best k first; their worst's logit is the bar
    std::nth_element(kept.begin(), kept.begin() + (k - 1), kept.end(), likelier);
    kept.resize(static_cast<size_t>(k));
    return kept[static_cast<size_t>(k - 1)].logit;
  };
  // Strictly above the bar is at or above the floor: a token at the floor may be
  // among the k.
  float bar = std::nextafter(group_max_floor(logits, vocab, k), -INFINITY);
  int64_t v = 0;
  if (bar == -INFINITY) {  // no floor: the first k tokens, and the least of them the bar
    for (; v < vocab && static_cast<int64_t>(kept.size()) < k; ++v)
      if (!std::isnan(logits[v])) kept.push_back({logits[v], static_cast<int32_t>(v)});
    if (static_cast<int64_t>(kept.size()) == k)
      bar = cut();
    else
      v = vocab;  // fewer than k tokens that are not NaN: all of them
  }
  const auto offer = [&](int64_t t) {
    if (!(logits[t] > bar)) return;
    kept.push_back({logits[t], static_cast<int32_t>(t)});
    if (static_cast<int64_t>(kept.size()) == 2 * k) bar = cut();
  };
  for (; v + kLanes <= vocab; v += kLanes) {
    F8 lo, hi;
    std::memcpy(&lo, logits + v, sizeof(F8));
    std::memcpy(&hi, logits + v + 8, sizeof(F8));
    const I8 above = (lo > bar) | (hi > bar);
    uint64_t any[4];
    std::memcpy(any, &above, sizeof(any));
    if ((any[0] | any[1] | any[2] | any[3]) == 0) continue;
    for (int64_t t = v; t < v + kLanes; ++t) offer(t);
  }
  for (; v < vocab; ++v) offer(v);
  if (static_cast<int64_t>(kept.size()) > k) cut();
  std::sort(kept.begin(), kept.end(), likelier);
  order.resize(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) order[i] = kept[i].id;
}

// A logit as a sort key: ascending keys are descending logits (-0 and +0 one
// key, as they compare equal).
uint32_t descending_key(float logit) {
  if (logit == 0.0f) logit = 0.0f;
  uint32_t u;
  std::memcpy(&u, &logit, sizeof(u));
  u = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;  // ascending floats, ascending u
  return ~u;
}

struct Keyed {
  uint32_t key;
  int32_t id;
};

// The selections' working memory, one per thread (the server's streams draw in
// parallel), kept between draws so a draw allocates nothing once warm.
struct SelectionScratch {
  std::vector<Candidate> kept;  // top_k_tokens
  std::vector<Keyed> a, b;      // sorted_tokens: the pairs, and the pass's output
  std::vector<uint32_t> count;  // sorted_tokens: the passes' bucket counts
};

// top_k_tokens for a k near the vocabulary: every non-NaN token in likelier
// order by a stable radix sort of (key, id) pairs, ids ascending to start
// with, so equal logits stay in id order: three passes of 11 bits, O(V). (A
// partial sort of all 32,000 ids, a heap sort, took 5-8 ms; std::sort of
// (logit, id) pairs 2.4 ms a draw with the exps: experiments/serving.md.)
void sorted_tokens(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>& order,
                   SelectionScratch& scratch) {
  constexpr int kBits = 11, kPasses = 3, kBuckets = 1 << kBits;
  std::vector<Keyed>& a = scratch.a;
  std::vector<Keyed>& b = scratch.b;
  std::vector<uint32_t>& count = scratch.count;
  a.clear();
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(logits[v])) a.push_back({descending_key(logits[v]), static_cast<int32_t>(v)});
  b.resize(a.size());
  count.assign(static_cast<size_t>(kPasses * kBuckets), 0);
  for (const Keyed& e : a)
    for (int p = 0; p < kPasses; ++p) ++count[p * kBuckets + ((e.key >> (p * kBits)) & (kBuckets - 1))];
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* c = count.data() + p * kBuckets;
    uint32_t start = 0;
    for (int d = 0; d < kBuckets; ++d) start += std::exchange(c[d], start);
    for (const Keyed& e : a) b[c[(e.key >> (p * kBits)) & (kBuckets - 1)]++] = e;
    a.swap(b);
  }
  const auto keep = std::min(static_cast<size_t>(k), a.size());
  order.resize(keep);
  for (size_t i = 0; i < keep; ++i) order[i] = a[i].id;
}

}  // namespace

int32_t argmax_logit(const float* logits, int64_t vocab) {
  SHAMN_CHECK(vocab >= 1, "sampling needs at least one token");
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
  const bool adjusts = options_.adjusts_logits();
  if (adjusts) {
    options_.check_vocabulary(vocab);
    adjusted_.assign(logits, logits + vocab);
    for (const auto& [token, bias] : options_.logit_bias) adjusted_[static_cast<size_t>(token)] += bias;
    for (const auto& [token, count] : counts_)
      adjusted_[static_cast<size_t>(token)] -= static_cast<float>(
          static_cast<double>(count) * options_.frequency_penalty + options_.presence_penalty);
    logits = adjusted_.data();
  }
  int32_t token;
  if (options_.temperature == 0.0) {
    token = argmax_logit(logits, vocab);  // greedy: the first maximum (a NaN logit never wins)
  } else {
    distribution(logits, vocab, scratch_);
    token = draw(scratch_);
  }
  if (options_.frequency_penalty != 0 || options_.presence_penalty != 0) ++counts_[token];
  return token;
}

void likeliest_tokens(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>& order) {
  k = std::min(k, vocab);
  thread_local SelectionScratch scratch;
  if (k * kSelectFraction <= vocab)
    top_k_tokens(logits, vocab, k, order, scratch.kept);
  else
    sorted_tokens(logits, vocab, k, order, scratch);
}

void Sampler::distribution(const float* logits, int64_t vocab, TokenDistribution& out) const {
  SHAMN_CHECK(vocab >= 1, "sampling needs at least one token");
  std::vector<int32_t>& order = out.tokens;
  std::vector<double>& probs = out.weights;
  if (options_.temperature == 0.0) {
    order.assign(1, argmax_logit(logits, vocab));
    probs.assign(1, 1.0);
    out.total = 1.0;
    return;
  }
  likeliest_tokens(logits, vocab, options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab, order);
  if (order.empty()) order.assign(1, argmax_logit(logits, vocab));  // every logit NaN

  probs.resize(order.size());
  const double top = logits[order[0]];
  double sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    const double l = logits[order[i]];
    // An infinite top (inf - inf is NaN) shares the mass among the tokens at it.
    sum += probs[i] = std::isfinite(top) ? std::exp((l - top) / options_.temperature) : l == top ? 1.0 : 0.0;
  }
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
