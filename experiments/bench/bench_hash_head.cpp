// The tied HashHead's loss, forward + backward, at the training shape (SPEC 1.2,
// 1.7): N = 4096 tokens, V = 32000, buckets = 1600, D = 512, h = 2, for 1 and 2
// threads.
//   fused:   hash_head_cross_entropy (16-row chunks, never holds [N, V])
//   unfused: cross_entropy(hash_head(...)), the two separate ops ([N, V] logits and
//            their gradient, 524 MB each)
//   gemms:   only the three bucket-score GEMMs the fused op runs (scores = z table^T,
//            dz = ds table, dtable = ds^T z): the floor under the fused op
//   embedding: hash_embedding forward + backward at the same shapes
// CPU time is the whole process's (all threads).
// Each iteration also includes what the op saves for backward and frees afterwards.
//
//   bench_hash_head --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>

#include "autograd/ops.h"
#include "autograd/ops_hash_embedding.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace {

constexpr int64_t kN = 4096, kV = 32000, kBuckets = 1600, kD = 512, kH = 2;

struct Problem {
  shamn::Var z, table, importance;
  shamn::Tensor bucket_index, tokens, targets, dembed;
  Problem() {
    shamn::Rng rng(7, 0);
    auto uniform = [&](const shamn::Shape& shape, double lo, double hi) {
      shamn::Tensor t = shamn::Tensor::empty(shape);
      rng.fill_uniform(t, lo, hi);
      return t;
    };
    auto ids = [&](int64_t n) {
      shamn::Tensor t = shamn::Tensor::empty({n}, shamn::DType::i32);
      for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(kV));
      return t;
    };
    z = shamn::Var(uniform({kN, kD}, -1, 1), true);
    table = shamn::Var(uniform({kBuckets, kD}, -0.05, 0.05), true);
    importance = shamn::Var(uniform({kV, kH}, 0.5, 1.5), true);
    bucket_index = shamn::hash_bucket_index(kV, kH, kBuckets);
    tokens = ids(kN);
    targets = ids(kN);
    dembed = uniform({kN, kD}, -1, 1);
  }
};

Problem& problem() {
  static Problem p;
  return p;
}

void bm_fused(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Problem& p = problem();
  for (auto _ : state) {
    shamn::Var loss = shamn::hash_head_cross_entropy(p.z, p.table, p.importance, p.bucket_index, p.targets);
    loss.backward();
    benchmark::DoNotOptimize(p.z.grad().raw_data());
  }
}

void bm_fused_forward(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Problem& p = problem();
  shamn::NoGradGuard no_grad;
  for (auto _ : state) {
    shamn::Var loss = shamn::hash_head_cross_entropy(p.z, p.table, p.importance, p.bucket_index, p.targets);
    benchmark::DoNotOptimize(loss.value().raw_data());
  }
}

void bm_unfused(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Problem& p = problem();
  for (auto _ : state) {
    shamn::Var loss =
        shamn::cross_entropy(shamn::hash_head(p.z, p.table, p.importance, p.bucket_index), p.targets);
    loss.backward();
    benchmark::DoNotOptimize(p.z.grad().raw_data());
  }
}

void bm_gemms(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Problem& p = problem();
  shamn::Tensor scores = shamn::Tensor::empty({kN, kBuckets});
  shamn::Tensor dz = shamn::Tensor::zeros({kN, kD}), dtable = shamn::Tensor::zeros({kBuckets, kD});
  const float* z = p.z.value().data<float>();
  const float* table = p.table.value().data<float>();
  float* s = scores.data<float>();
  using shamn::Trans;
  for (auto _ : state) {
    shamn::gemm(Trans::no, Trans::yes, kN, kBuckets, kD, 1.0f, z, kD, table, kD, 0.0f, s, kBuckets);
    shamn::gemm(Trans::no, Trans::no, kN, kD, kBuckets, 1.0f, s, kBuckets, table, kD, 1.0f, dz.data<float>(),
                kD);
    shamn::gemm(Trans::yes, Trans::no, kBuckets, kD, kN, 1.0f, s, kBuckets, z, kD, 1.0f, dtable.data<float>(),
                kD);
    benchmark::DoNotOptimize(dtable.raw_data());
  }
}

void bm_embedding(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  Problem& p = problem();
  for (auto _ : state) {
    shamn::Var e = shamn::hash_embedding(p.table, p.importance, p.bucket_index, p.tokens);
    e.backward(p.dembed);
    benchmark::DoNotOptimize(p.table.grad().raw_data());
  }
}

int register_all() {
  const std::pair<const char*, void (*)(benchmark::State&)> benches[] = {
      {"hash_head_ce/fused/fwd+bwd", bm_fused},     {"hash_head_ce/fused/fwd", bm_fused_forward},
      {"hash_head_ce/unfused/fwd+bwd", bm_unfused}, {"hash_head_ce/gemms_only", bm_gemms},
      {"hash_embedding/fwd+bwd", bm_embedding},
  };
  for (const auto& [name, fn] : benches)
    benchmark::RegisterBenchmark(name, fn)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->MeasureProcessCPUTime()
        ->Unit(benchmark::kMillisecond);
  return 0;
}

const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
