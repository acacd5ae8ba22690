// RMSNorm forward and backward over the model's activations ([rows, 512]),
// with the operands warm (one set, reused: L2/L3) or cold (a set chosen in turn
// from enough sets to overflow the L3, as in the training step, where the
// norm's input was written an op or more earlier). Bytes are the operands'
// minimum traffic: forward x read, y written; backward x, dy read, dx written.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_inputs.h"
#include "core/heap_policy.h"
#include "core/kernels/rms_norm.h"
#include "core/parallel.h"

namespace {

constexpr int64_t kDim = 512;

struct NormSet {
  std::vector<float> x, y, dy, dx, rstd;
};

std::vector<NormSet> make_sets(int64_t rows, int64_t count) {
  std::vector<NormSet> sets(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    NormSet& s = sets[static_cast<size_t>(k)];
    s.x = shamn::bench::random_floats(rows * kDim, 11 + static_cast<uint32_t>(k));
    s.dy = shamn::bench::random_floats(rows * kDim, 31 + static_cast<uint32_t>(k));
    s.y.assign(s.x.size(), 0.0f);
    s.dx.assign(s.x.size(), 0.0f);
    s.rstd.assign(static_cast<size_t>(rows), 0.0f);
    shamn::rms_norm_forward(s.y.data(), s.rstd.data(), s.x.data(), s.x.data(), rows, kDim, 1e-5f);
  }
  return sets;
}

// Args: rows, sets (1: warm; 8 sets of 4,096 rows are 256 MiB: cold).
void BM_rms_norm_forward(benchmark::State& state) {
  const int64_t rows = state.range(0);
  std::vector<NormSet> sets = make_sets(rows, state.range(1));
  const std::vector<float> gain = shamn::bench::random_floats(kDim, 7);
  size_t k = 0;
  for (auto _ : state) {
    NormSet& s = sets[k++ % sets.size()];
    shamn::rms_norm_forward(s.y.data(), s.rstd.data(), s.x.data(), gain.data(), rows, kDim, 1e-5f);
    benchmark::DoNotOptimize(s.y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * kDim * 2 * static_cast<int64_t>(sizeof(float)));
}

// Args: rows, sets, and 1 where dx is written (a fresh buffer), 0 where added to.
void BM_rms_norm_backward(benchmark::State& state) {
  const int64_t rows = state.range(0);
  std::vector<NormSet> sets = make_sets(rows, state.range(1));
  const std::vector<float> gain = shamn::bench::random_floats(kDim, 7);
  std::vector<float> dgain(kDim, 0.0f);
  const bool fresh = state.range(2) != 0;
  size_t k = 0;
  for (auto _ : state) {
    NormSet& s = sets[k++ % sets.size()];
    shamn::rms_norm_backward(s.dx.data(), dgain.data(), s.dy.data(), s.x.data(), gain.data(), s.rstd.data(),
                             rows, kDim, fresh);
    benchmark::DoNotOptimize(s.dx.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * kDim * (fresh ? 3 : 4) *
                          static_cast<int64_t>(sizeof(float)));
}

BENCHMARK(BM_rms_norm_forward)
    ->Args({4096, 1})
    ->Args({4096, 8})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_rms_norm_backward)
    ->Args({4096, 1, 1})
    ->Args({4096, 8, 1})
    ->Args({4096, 8, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  shamn::keep_freed_memory_in_process();
  shamn::set_num_threads(1);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
