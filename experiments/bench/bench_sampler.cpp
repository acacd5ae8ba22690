// One stream's next token from its logits (infer/sampler.h), at a vocabulary
// of 32,000 (the default and Brown configs'): what a decode step pays per
// stream after the model, once for every running request of `shamn serve`.
//
//   BM_greedy: temperature 0, argmax_logit.
//   BM_sample: temperature 0.8 with top_k = arg (0: no limit) and top_p =
//              0.95, the server's defaults at top_k 40.
//   BM_sample_rows: BM_sample/40 over 64 rows of logits in turn (8 MB, as a
//              64-stream step of `shamn serve` leaves them): each draw reads
//              its row from beyond L2, and its branches are not the last
//              draw's. BM_sample's one row stays in L1/L2 and the branch
//              predictor learns its selection, so it understates a draw.
//   BM_top_k_partial_sort: the baseline, how the sampler chose its top k
//              before stop 49: std::partial_sort of every token id by logit
//              (k = 32,000: a heap sort of the whole vocabulary).
//   BM_top_k_sampler: the same k through the sampler's distribution
//              (temperature 1, top_p 1): its top k (top_k_tokens, or the radix
//              sort from k > V / 8), plus the k exps that follow.
//
// Logits: uniform in [-8, 8), the same every run. Counter: ns per sample (the
// benchmark's time).
//   bench_sampler --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "bench_inputs.h"
#include "infer/sampler.h"

namespace {

using namespace shamn;

constexpr int64_t kVocab = 32000;

std::vector<float> logits() {
  std::vector<float> l = bench::random_floats(kVocab, 7);
  for (float& v : l) v *= 8.0f;
  return l;
}

SamplingOptions options(double temperature, int64_t top_k, double top_p) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

void BM_greedy(benchmark::State& state) {
  const std::vector<float> l = logits();
  for (auto _ : state) benchmark::DoNotOptimize(argmax_logit(l.data(), kVocab));
}
BENCHMARK(BM_greedy);

void BM_sample(benchmark::State& state) {
  const std::vector<float> l = logits();
  Sampler s(options(0.8, state.range(0), 0.95));
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(l.data(), kVocab));
}
BENCHMARK(BM_sample)->Arg(40)->Arg(0);

void BM_sample_rows(benchmark::State& state) {
  constexpr int64_t kRows = 64;
  std::vector<float> rows(static_cast<size_t>(kRows * kVocab));
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<float> l = bench::random_floats(kVocab, static_cast<uint32_t>(100 + r));
    for (int64_t t = 0; t < kVocab; ++t) rows[static_cast<size_t>(r * kVocab + t)] = 8.0f * l[t];
  }
  Sampler s(options(0.8, state.range(0), 0.95));
  int64_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.sample(rows.data() + r * kVocab, kVocab));
    r = (r + 1) % kRows;
  }
}
BENCHMARK(BM_sample_rows)->Arg(40);

void BM_top_k_partial_sort(benchmark::State& state) {
  const std::vector<float> l = logits();
  const int64_t k = state.range(0);
  std::vector<int32_t> order(static_cast<size_t>(kVocab));
  for (auto _ : state) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    benchmark::DoNotOptimize(order.data());
  }
}
BENCHMARK(BM_top_k_partial_sort)->Arg(40)->Arg(400)->Arg(kVocab);

void BM_top_k_sampler(benchmark::State& state) {
  const std::vector<float> l = logits();
  const Sampler s(options(1.0, state.range(0), 1.0));
  TokenDistribution d;
  for (auto _ : state) {
    s.distribution(l.data(), kVocab, d);
    benchmark::DoNotOptimize(d.tokens.data());
  }
}
BENCHMARK(BM_top_k_sampler)->Arg(40)->Arg(400)->Arg(kVocab);

}  // namespace

BENCHMARK_MAIN();
