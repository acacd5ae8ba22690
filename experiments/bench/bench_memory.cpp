// The product-key memory lookup (SPEC 1.5) at the SPEC default shapes: N = 4096
// tokens, D = 512, key_dim = 256 (dh = 128), n = 256 keys per half (65536 slots),
// k = 32; 1 and 2 threads. Forward and backward, whole and split into stages:
//   fwd/scores   the two score GEMMs  s1 = Q1 keys1^T, s2 = Q2 keys2^T  [N, n] each
//   fwd/select   top-k of s1 and s2, the merge of the k*k candidates, the softmax
//   fwd/gather   the weighted sum of the k selected value rows
//   bwd/dsigma   dout . values[slot] and the softmax backward (the gather's backward
//                towards the scores)
//   bwd/keys     dq, dkeys1, dkeys2 from dsigma (the score GEMMs' backward, sparse)
//   bwd/values   dvalues[slot] += w * dout, grouped by slot
//   op/fwd_bwd   the autograd op forward + backward, gradient buffers included
// Each reports tokens/s ("tok/s").
//
//   bench_memory --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops_product_key.h"
#include "core/kernels/product_key.h"
#include "core/parallel.h"

namespace {

constexpr int64_t kTokens = 4096;
const shamn::ProductKeyDims kDims{256, 128, 32, 512};

std::vector<float> random_vector(int64_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

struct Data {
  const shamn::ProductKeyDims& d = kDims;
  const int64_t N = kTokens;
  std::vector<float> q = random_vector(N * 2 * d.dh, 1, 1.0f);
  std::vector<float> keys1 = random_vector(d.n * d.dh, 2, 0.1f);
  std::vector<float> keys2 = random_vector(d.n * d.dh, 3, 0.1f);
  std::vector<float> values = random_vector(d.slots() * d.dim, 4, 0.05f);
  std::vector<float> dout = random_vector(N * d.dim, 5, 1e-3f);
  std::vector<float> out = std::vector<float>(static_cast<size_t>(N * d.dim));
  std::vector<float> s1 = std::vector<float>(static_cast<size_t>(N * d.n));
  std::vector<float> s2 = std::vector<float>(static_cast<size_t>(N * d.n));
  std::vector<int32_t> slots = std::vector<int32_t>(static_cast<size_t>(N * d.k));
  std::vector<float> weights = std::vector<float>(static_cast<size_t>(N * d.k));
  std::vector<float> dsigma = std::vector<float>(static_cast<size_t>(N * d.k));
  // Backward kernels accumulate: the gradient buffers are never reset between
  // iterations (dout is small, so nothing overflows).
  std::vector<float> dq = std::vector<float>(static_cast<size_t>(N * 2 * d.dh));
  std::vector<float> dkeys1 = std::vector<float>(static_cast<size_t>(d.n * d.dh));
  std::vector<float> dkeys2 = std::vector<float>(static_cast<size_t>(d.n * d.dh));
  std::vector<float> dvalues = std::vector<float>(static_cast<size_t>(d.slots() * d.dim));

  Data() {
    // The selection the backward stages read.
    shamn::product_key_forward(out.data(), slots.data(), weights.data(), q.data(), keys1.data(), keys2.data(),
                               values.data(), N, d);
    shamn::product_key_scores(s1.data(), s2.data(), q.data(), keys1.data(), keys2.data(), N, d);
    shamn::product_key_backward_scores(dsigma.data(), dout.data(), values.data(), slots.data(),
                                       weights.data(), N, d);
  }
};

Data& data() {
  static Data instance;
  return instance;
}

void fwd_scores(Data& x) {
  shamn::product_key_scores(x.s1.data(), x.s2.data(), x.q.data(), x.keys1.data(), x.keys2.data(), x.N, x.d);
}
void fwd_select(Data& x) {
  shamn::product_key_select(x.slots.data(), x.weights.data(), x.s1.data(), x.s2.data(), x.N, x.d);
}
void fwd_gather(Data& x) {
  shamn::product_key_gather(x.out.data(), x.values.data(), x.slots.data(), x.weights.data(), x.N, x.d);
}
void fwd_total(Data& x) {
  shamn::product_key_forward(x.out.data(), x.slots.data(), x.weights.data(), x.q.data(), x.keys1.data(),
                             x.keys2.data(), x.values.data(), x.N, x.d);
}
void bwd_dsigma(Data& x) {
  shamn::product_key_backward_scores(x.dsigma.data(), x.dout.data(), x.values.data(), x.slots.data(),
                                     x.weights.data(), x.N, x.d);
}
void bwd_keys(Data& x) {
  shamn::product_key_backward_keys(x.dq.data(), x.dkeys1.data(), x.dkeys2.data(), x.dsigma.data(), x.q.data(),
                                   x.keys1.data(), x.keys2.data(), x.slots.data(), x.N, x.d);
}
void bwd_values(Data& x) {
  shamn::product_key_backward_values(x.dvalues.data(), x.dout.data(), x.slots.data(), x.weights.data(), x.N,
                                     x.d);
}
void bwd_total(Data& x) {
  shamn::product_key_backward(x.dq.data(), x.dkeys1.data(), x.dkeys2.data(), x.dvalues.data(), x.dout.data(),
                              x.q.data(), x.keys1.data(), x.keys2.data(), x.values.data(), x.slots.data(),
                              x.weights.data(), x.N, x.d);
}
void fwd_bwd_total(Data& x) {
  fwd_total(x);
  bwd_total(x);
}

// The autograd op as a layer would call it: leaf Vars over copies of the data,
// forward, backward with dout as the seed; the leaves' gradients are dropped each
// iteration, so their allocation and zero-filling are counted.
void op_fwd_bwd(Data& x) {
  using shamn::Tensor;
  using shamn::Var;
  static const Tensor q = Tensor::from_data<float>({x.N, 2 * x.d.dh}, x.q);
  static const Tensor k1 = Tensor::from_data<float>({x.d.n, x.d.dh}, x.keys1);
  static const Tensor k2 = Tensor::from_data<float>({x.d.n, x.d.dh}, x.keys2);
  static const Tensor v = Tensor::from_data<float>({x.d.slots(), x.d.dim}, x.values);
  static const Tensor seed = Tensor::from_data<float>({x.N, x.d.dim}, x.dout);
  Var qv(q, true), k1v(k1, true), k2v(k2, true), vv(v, true);
  Var out = shamn::product_key_memory(qv, k1v, k2v, vv, x.d.k);
  out.backward(seed);
  benchmark::DoNotOptimize(vv.grad().raw_data());
}

void run(benchmark::State& state, void (*stage)(Data&)) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Data& x = data();
  for (auto _ : state) {
    stage(x);
    benchmark::ClobberMemory();
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(x.N), benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  const std::pair<const char*, void (*)(Data&)> stages[] = {
      {"fwd/scores", fwd_scores}, {"fwd/select", fwd_select}, {"fwd/gather", fwd_gather},
      {"fwd/total", fwd_total},   {"bwd/dsigma", bwd_dsigma}, {"bwd/keys", bwd_keys},
      {"bwd/values", bwd_values}, {"bwd/total", bwd_total},   {"fwd_bwd/total", fwd_bwd_total},
      {"op/fwd_bwd", op_fwd_bwd},
  };
  for (int threads : {1, 2})
    for (const auto& [name, stage] : stages)
      benchmark::RegisterBenchmark(name, run, stage)
          ->ArgName("threads")
          ->Arg(threads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  return 0;
}

const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
