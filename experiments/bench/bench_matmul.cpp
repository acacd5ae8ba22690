// shamn::gemm against OpenBLAS's cblas_sgemm at the model's linear-layer shapes
// (4096 tokens, d_model 512, d_ff 2048), for 1 and 2 threads.
//
// Each benchmark is named  <library>/<shape>/threads:<n>/real_time  and reports the
// counter FLOPs: 2*M*N*K floating-point operations per second ("85.2G/s" = 85.2 GFLOP/s).
//
//   bench_matmul --benchmark_enable_random_interleaving=true
//                --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
// (experiments/matmul.md: on a shared machine, interleaving spreads other jobs' load
// bursts over both libraries instead of one group of benchmarks).
#include <cblas.h>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/gemm.h"
#include "core/parallel.h"

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  const char* name;
  shamn::Trans ta, tb;
  int64_t M, N, K;
};

// y = x W^T (forward), grad_x = dy W, grad_W = dy^T x (backward), for
// W [512,512], W [2048,512] (up-projection) and W [512,2048] (down-projection).
const Shape kShapes[] = {
    {"fwd_y4096x512_x4096x512_W512x512T", shamn::Trans::no, shamn::Trans::yes, 4096, 512, 512},
    {"bwd_dx4096x512_dy4096x512_W512x512", shamn::Trans::no, shamn::Trans::no, 4096, 512, 512},
    {"bwd_dW512x512_dy4096x512T_x4096x512", shamn::Trans::yes, shamn::Trans::no, 512, 512, 4096},
    {"fwd_y4096x2048_x4096x512_W2048x512T", shamn::Trans::no, shamn::Trans::yes, 4096, 2048, 512},
    {"bwd_dx4096x512_dy4096x2048_W2048x512", shamn::Trans::no, shamn::Trans::no, 4096, 512, 2048},
    {"bwd_dW2048x512_dy4096x2048T_x4096x512", shamn::Trans::yes, shamn::Trans::no, 2048, 512, 4096},
    {"fwd_y4096x512_x4096x2048_W512x2048T", shamn::Trans::no, shamn::Trans::yes, 4096, 512, 2048},
    {"bwd_dx4096x2048_dy4096x512_W512x2048", shamn::Trans::no, shamn::Trans::no, 4096, 2048, 512},
    {"bwd_dW512x2048_dy4096x512T_x4096x2048", shamn::Trans::yes, shamn::Trans::no, 512, 2048, 4096},
    // The default model's weight gradients over a batch of 96 x 512 tokens: the
    // routers' (16 experts, 4 groups) and the memory query's (key_dim 256). C has
    // few tiles and K is long: gemm splits K between threads (core/gemm_isa.cpp).
    {"bwd_dW16x512_dy49152x16T_x49152x512", shamn::Trans::yes, shamn::Trans::no, 16, 512, 49152},
    {"bwd_dW4x512_dy49152x4T_x49152x512", shamn::Trans::yes, shamn::Trans::no, 4, 512, 49152},
    {"bwd_dW256x512_dy49152x256T_x49152x512", shamn::Trans::yes, shamn::Trans::no, 256, 512, 49152},
    // The routers at batch 8 x 512: C has a few columns (4 groups, 16 experts).
    {"fwd_y4096x4_x4096x512_W4x512T", shamn::Trans::no, shamn::Trans::yes, 4096, 4, 512},
    {"fwd_y4096x16_x4096x512_W16x512T", shamn::Trans::no, shamn::Trans::yes, 4096, 16, 512},
    {"bwd_dx4096x512_dy4096x4_W4x512", shamn::Trans::no, shamn::Trans::no, 4096, 512, 4},
    {"bwd_dx4096x512_dy4096x16_W16x512", shamn::Trans::no, shamn::Trans::no, 4096, 512, 16},
    {"bwd_dW16x512_dy4096x16T_x4096x512", shamn::Trans::yes, shamn::Trans::no, 16, 512, 4096},
    {"bwd_dW4x512_dy4096x4T_x4096x512", shamn::Trans::yes, shamn::Trans::no, 4, 512, 4096},
    // Both routers in one product (layers/hierarchical_moe.cpp): 4 + 16 columns.
    {"fwd_y4096x20_x4096x512_W20x512T", shamn::Trans::no, shamn::Trans::yes, 4096, 20, 512},
    {"bwd_dx4096x512_dy4096x20_W20x512", shamn::Trans::no, shamn::Trans::no, 4096, 512, 20},
    {"bwd_dW20x512_dy4096x20T_x4096x512", shamn::Trans::yes, shamn::Trans::no, 20, 512, 4096},
};

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc;
  explicit Operands(const Shape& s) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K]; all densely packed.
    lda = s.ta == shamn::Trans::yes ? s.M : s.K;
    ldb = s.tb == shamn::Trans::yes ? s.K : s.N;
    ldc = s.N;
    a.resize(static_cast<size_t>(s.M * s.K));
    b.resize(static_cast<size_t>(s.K * s.N));
    c.assign(static_cast<size_t>(s.M * s.N), 0.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
  }
};

void set_counters(benchmark::State& state, const Shape& s) {
  // Shown as e.g. "FLOPs=85.2G/s", i.e. 85.2 GFLOP/s (1000-based prefixes).
  state.counters["FLOPs"] =
      benchmark::Counter(2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K),
                         benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::OneK::kIs1000);
}

void bm_shamn(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  shamn::set_num_threads(threads);
  Operands op(s);
  for (auto _ : state) {
    shamn::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, op.a.data(), op.lda, op.b.data(), op.ldb, 0.0f, op.c.data(),
                op.ldc);
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s);
}

void bm_openblas(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  openblas_set_num_threads(threads);
  Operands op(s);
  const auto ta = s.ta == shamn::Trans::yes ? CblasTrans : CblasNoTrans;
  const auto tb = s.tb == shamn::Trans::yes ? CblasTrans : CblasNoTrans;
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K),
                1.0f, op.a.data(), static_cast<int>(op.lda), op.b.data(), static_cast<int>(op.ldb), 0.0f,
                op.c.data(), static_cast<int>(op.ldc));
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s);
}

// Grouped by library, then thread count: OpenBLAS's idle workers spin for a while
// after each call, and on a 2-core machine a spinning worker would steal the core
// from whatever runs next; this order keeps every benchmark after a like one.
int register_all() {
  for (int lib = 0; lib < 2; ++lib)
    for (int threads : {1, 2})
      for (const Shape& s : kShapes) {
        const std::string name = std::string(lib == 0 ? "shamn/" : "openblas/") + s.name;
        auto* b = lib == 0 ? benchmark::RegisterBenchmark(name.c_str(), bm_shamn, s)
                           : benchmark::RegisterBenchmark(name.c_str(), bm_openblas, s);
        b->ArgName("threads")->Arg(threads)->UseRealTime()->Unit(benchmark::kMillisecond);
      }
  return 0;
}

const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
