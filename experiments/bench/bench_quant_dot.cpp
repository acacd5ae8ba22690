// The quantised dot kernels (infer/quant_dot.h) at the default model's shapes,
// for each path this CPU runs, against a plain vectorised f32 GEMV.
//   dot:    one row . x, cols = 512 or 4096 (single thread)
//   matvec: W[rows, cols] . x, rows split over shamn::parallel_for
//           512x512 (a block-sparse projection's size), 32000x512 (head-like),
//           512x4096 (a wide input)
// Counters: GOPS = 2 * rows * cols / s (a multiply-add is 2 ops), GBps = bytes
// of weights read / s (blocks include their scales). Args: path (0 scalar,
// 1 avx2, 2 avx512, 3 f32), rows, cols, threads.
//
//   rows:   the runtime's single-thread building block, W[rows, cols] . x in one
//           call, on the CPU's best path: row-major blocks (dot_rows_q8/q4)
//           vs row-interleaved tiles (dot_tiles) vs the runtime's f32 rows
//           (simd::dot). 32x64 is one block-sparse row block at the default
//           config (2 active blocks), 512x512 the memory query, 1600x512 the
//           tied head's bucket scores. Args: layout (0 rows, 1 tiles, 2 f32), q4.
//
//   batch:  W[rows, cols] (tiles, q8) times n activation rows, on the CPU's
//           best path: n dot_tiles calls (one per row) vs one dot_tiles_batch
//           (each tile loaded once per group of rows), the prefill's product.
//           Args: batched (0/1), rows, cols, n.
//
//   quantize: n activation rows of `cols` values quantised to Q8 blocks with
//           their block sums (quantize_row_q8_sums), as prefill
//           does before every product. Args: path, cols, rows; counter Mvals/s.
//
//   bench_quant_dot --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_inputs.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "core/simd.h"
#include "infer/quant_blocks.h"
#include "infer/quant_dot.h"
#include "infer/quant_tiles.h"

namespace {

constexpr int kF32 = 3;
const char* kPathNames[] = {"scalar", "avx2", "avx512", "f32"};

using shamn::bench::random_floats;

// The baseline: 16 independent partial sums, which GCC vectorises without -ffast-math.
float dot_f32(const float* w, const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += w[i + j] * x[i + j];
  float s = 0.0f;
  for (; i < n; ++i) s += w[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

void set_counters(benchmark::State& state, int64_t rows, int64_t cols, double weight_bytes) {
  state.counters["GOPS"] =
      benchmark::Counter(2.0 * rows * cols * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GBps"] =
      benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Returns false (and skips) when the CPU lacks the path.
bool select_path(benchmark::State& state, int path) {
  if (path == kF32) return true;
  const auto k = static_cast<shamn::KernelLevel>(path);
  if (!shamn::kernel_level_supported(k)) {
    state.SkipWithError("this CPU lacks the path");
    return false;
  }
  shamn::set_kernel_level(k);
  return true;
}

// Weights for one shape, built once per process: Google Benchmark calls a
// benchmark function several times (estimation, repetitions).
struct Matrix {
  std::vector<float> w, x;
  std::vector<shamn::BlockQ8> w8, xq;
  std::vector<shamn::BlockQ4> w4;
};

const Matrix& matrix(int64_t rows, int64_t cols) {
  static std::map<std::pair<int64_t, int64_t>, Matrix> cache;
  auto [it, fresh] = cache.try_emplace({rows, cols});
  Matrix& m = it->second;
  if (!fresh) return m;
  const int64_t bpr = shamn::quant_blocks(cols);
  m.w = random_floats(rows * cols, 1);
  m.x = random_floats(cols, 2);
  m.w8.resize(static_cast<size_t>(rows * bpr));
  m.w4.resize(static_cast<size_t>(rows * bpr));
  m.xq.resize(static_cast<size_t>(bpr));
  shamn::quantize_row_q8(m.x.data(), m.xq.data(), cols);
  for (int64_t r = 0; r < rows; ++r) {
    shamn::quantize_row_q8(m.w.data() + r * cols, m.w8.data() + r * bpr, cols);
    shamn::quantize_row_q4(m.w.data() + r * cols, m.w4.data() + r * bpr, cols);
  }
  return m;
}

template <bool Q4>
void BM_matvec(benchmark::State& state) {
  const int path = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  state.SetLabel(kPathNames[path]);
  if (!select_path(state, path)) return;
  shamn::set_num_threads(static_cast<int>(state.range(3)));
  const int64_t bpr = shamn::quant_blocks(cols);
  const Matrix& m = matrix(rows, cols);
  std::vector<float> y(static_cast<size_t>(rows));
  if (path == kF32) {
    for (auto _ : state) {
      shamn::parallel_for(0, rows, 16, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) y[r] = dot_f32(m.w.data() + r * cols, m.x.data(), cols);
      });
      benchmark::DoNotOptimize(y.data());
    }
    set_counters(state, rows, cols, 4.0 * rows * cols);
  } else {
    for (auto _ : state) {
      if (Q4)
        shamn::matvec_q4(m.w4.data(), rows, bpr, m.xq.data(), y.data());
      else
        shamn::matvec_q8(m.w8.data(), rows, bpr, m.xq.data(), y.data());
      benchmark::DoNotOptimize(y.data());
    }
    set_counters(state, rows, cols,
                 double(rows * bpr) * (Q4 ? sizeof(shamn::BlockQ4) : sizeof(shamn::BlockQ8)));
  }
  shamn::set_num_threads(0);
  shamn::set_kernel_level(shamn::best_kernel_level());
}

void BM_dot_q8(benchmark::State& state) {
  const int path = static_cast<int>(state.range(0));
  const int64_t cols = state.range(1);
  state.SetLabel(kPathNames[path]);
  if (!select_path(state, path)) return;
  const std::vector<float> w = random_floats(cols, 1), x = random_floats(cols, 2);
  const int64_t blocks = shamn::quant_blocks(cols);
  std::vector<shamn::BlockQ8> wq(static_cast<size_t>(blocks)), xq(static_cast<size_t>(blocks));
  shamn::quantize_row_q8(w.data(), wq.data(), cols);
  shamn::quantize_row_q8(x.data(), xq.data(), cols);
  for (auto _ : state) {
    float s =
        path == kF32 ? dot_f32(w.data(), x.data(), cols) : shamn::dot_q8_q8(wq.data(), xq.data(), blocks);
    benchmark::DoNotOptimize(s);
  }
  set_counters(state, 1, cols, path == kF32 ? 4.0 * cols : double(blocks * sizeof(shamn::BlockQ8)));
  shamn::set_kernel_level(shamn::best_kernel_level());
}

const char* kLayoutNames[] = {"rows", "tiles", "f32"};

void BM_rows(benchmark::State& state) {
  const int layout = static_cast<int>(state.range(0));
  const bool q4 = state.range(1) != 0;
  const int64_t rows = state.range(2), cols = state.range(3), bpr = shamn::quant_blocks(cols);
  state.SetLabel(std::string(kLayoutNames[layout]) + (layout == 2 ? "" : q4 ? " q4" : " q8"));
  const Matrix& m = matrix(rows, cols);
  std::vector<shamn::TileQ8> t8(static_cast<size_t>(shamn::row_tiles(rows) * bpr));
  std::vector<shamn::TileQ4> t4(t8.size());
  shamn::pack_tiles(m.w8.data(), rows, bpr, t8.data());
  shamn::pack_tiles(m.w4.data(), rows, bpr, t4.data());
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : state) {
    if (layout == 2)
      for (int64_t r = 0; r < rows; ++r) y[r] = shamn::simd::dot(m.w.data() + r * cols, m.x.data(), cols);
    else if (layout == 1 && q4)
      shamn::dot_tiles(t4.data(), rows, bpr, m.xq.data(), y.data());
    else if (layout == 1)
      shamn::dot_tiles(t8.data(), rows, bpr, m.xq.data(), y.data());
    else if (q4)
      shamn::dot_rows_q4(m.w4.data(), rows, bpr, m.xq.data(), y.data());
    else
      shamn::dot_rows_q8(m.w8.data(), rows, bpr, m.xq.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double block_bytes = q4 ? sizeof(shamn::BlockQ4) : sizeof(shamn::BlockQ8);
  set_counters(state, rows, cols, layout == 2 ? 4.0 * rows * cols : double(rows * bpr) * block_bytes);
}

void BM_batch(benchmark::State& state) {
  const bool batched = state.range(0) != 0;
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3),
                bpr = shamn::quant_blocks(cols);
  state.SetLabel(batched ? "dot_tiles_batch" : "dot_tiles per row");
  const Matrix& m = matrix(rows, cols);
  std::vector<shamn::TileQ8> t8(static_cast<size_t>(shamn::row_tiles(rows) * bpr));
  shamn::pack_tiles(m.w8.data(), rows, bpr, t8.data());
  std::vector<shamn::BlockQ8> xq(static_cast<size_t>(n * bpr));
  const std::vector<float> x = random_floats(n * cols, 3);
  // With each block's sum of values, as the runtime's quantised activations come.
  std::vector<int32_t> sums(xq.size());
  for (int64_t t = 0; t < n; ++t)
    shamn::quantize_row_q8_sums(x.data() + t * cols, xq.data() + t * bpr, sums.data() + t * bpr, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  shamn::Q8Rows rows_x{xq.data(), n, bpr};
  rows_x.sums = sums.data();
  for (auto _ : state) {
    if (batched)
      shamn::dot_tiles_batch(t8.data(), rows, bpr, rows_x, y.data(), rows);
    else
      for (int64_t t = 0; t < n; ++t)
        shamn::dot_tiles(t8.data(), rows, bpr, xq.data() + t * bpr, y.data() + t * rows);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, rows * n, cols, double(rows * bpr) * sizeof(shamn::BlockQ8));
}

void BM_quantize(benchmark::State& state) {
  const int path = static_cast<int>(state.range(0));
  const int64_t cols = state.range(1), rows = state.range(2), bpr = shamn::quant_blocks(cols);
  state.SetLabel(kPathNames[path]);
  if (!select_path(state, path)) return;
  // GELU-like activations: mostly small, some near zero, a few large.
  const std::vector<float> x = random_floats(rows * cols, 4);
  std::vector<shamn::BlockQ8> xq(static_cast<size_t>(rows * bpr));
  std::vector<int32_t> sums(xq.size());
  for (auto _ : state) {
    for (int64_t t = 0; t < rows; ++t)
      shamn::quantize_row_q8_sums(x.data() + t * cols, xq.data() + t * bpr, sums.data() + t * bpr, cols);
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["Mvals"] =
      benchmark::Counter(double(rows * cols) * 1e-6, benchmark::Counter::kIsIterationInvariantRate);
  shamn::set_kernel_level(shamn::best_kernel_level());
}

// q8 also runs the f32 baseline (path 3); q4 runs the quantised paths only.
template <int LastPath>
void matvec_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{512, 512}, {32000, 512}, {512, 4096}})
      for (int path = 0; path <= LastPath; ++path) b->Args({path, rows, cols, threads});
  b->ArgNames({"path", "rows", "cols", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(BM_dot_q8)->ArgsProduct({{0, 1, 2, kF32}, {512, 4096}})->ArgNames({"path", "cols"});
BENCHMARK_TEMPLATE(BM_matvec, false)->Name("BM_matvec_q8")->Apply(matvec_args<kF32>);
BENCHMARK_TEMPLATE(BM_matvec, true)->Name("BM_matvec_q4")->Apply(matvec_args<2>);

BENCHMARK(BM_rows)
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {32}, {64}})
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {512, 1600}, {512}})
    ->ArgNames({"layout", "q4", "rows", "cols"});

BENCHMARK(BM_batch)
    ->ArgsProduct({{0, 1}, {32}, {64}, {1, 4, 16, 128}})
    ->ArgsProduct({{0, 1}, {512, 1600}, {512}, {1, 4, 16, 128}})
    ->ArgNames({"batched", "rows", "cols", "n"});

BENCHMARK(BM_quantize)->ArgsProduct({{0, 1, 2}, {512}, {64}})->ArgNames({"path", "cols", "rows"});

BENCHMARK_MAIN();
