// A LoRA adapter's two products at the Brown small model's shapes (D = 256,
// an adapted 256 x 256 matrix, 75% block-sparse at block 32: 64 weights of
// each output row), one activation row at a time, on the CPU's best path:
//
//   BM_lora_a: t = A x, A [r, 256]. layout 0: A in the runtime's tiles of 16
//              rows (dot_tiles: half of each tile is padding at rank 8);
//              layout 1: A in low-rank chunks of 8 rows (low_rank_add_q8).
//   BM_lora_b: y += B t, B [256, r]. layout 0: B as f32 columns [r, 256], r
//              axpys of 16 outputs (the runtime's f32 loop before stop 54,
//              whose sums GCC kept on the stack; infer/lora_term.cpp now
//              keeps them in registers); layout 1: B in int8 chunks
//              (low_rank_add_q8), t quantised.
//   BM_base:   the base's own product of the same matrix, y = W x with W
//              [256, 64] in tiles (dot_tiles): what an adapter's cost is
//              compared with.
//
// Args: layout, rank. Counter: ns per activation row (the benchmark's time).
//   bench_low_rank --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bench_inputs.h"
#include "infer/low_rank_q8.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

namespace {

using namespace shamn;

constexpr int64_t kDim = 256;

using shamn::bench::random_floats;

// w [rows, cols] f32 -> row-major q8 blocks.
std::vector<BlockQ8> quantised_rows(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<BlockQ8> q(static_cast<size_t>(rows * quant_blocks(cols)));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row_q8(w.data() + r * cols, q.data() + r * quant_blocks(cols), cols);
  return q;
}

std::vector<TileQ8> tiles_of(const std::vector<BlockQ8>& rows_q, int64_t rows, int64_t cols) {
  std::vector<TileQ8> t(static_cast<size_t>(row_tiles(rows) * quant_blocks(cols)));
  pack_tiles(rows_q.data(), rows, quant_blocks(cols), t.data());
  return t;
}

// One quantised activation row of n values and its block sums.
struct QuantRow {
  std::vector<BlockQ8> q;
  std::vector<int32_t> sums;
  explicit QuantRow(int64_t n) : q(static_cast<size_t>(quant_blocks(n))), sums(q.size()) {
    const std::vector<float> x = random_floats(n, 7);
    quantize_row_q8(x.data(), q.data(), n);
    q8_block_sums(q.data(), quant_blocks(n), sums.data());
  }
};

void BM_lora_a(benchmark::State& state) {
  const bool chunks = state.range(0) == 1;
  const int64_t r = state.range(1);
  const std::vector<BlockQ8> a = quantised_rows(random_floats(r * kDim, 1), r, kDim);
  const std::vector<TileQ8> tiles = tiles_of(a, r, kDim);
  const LowRankQ8 packed = pack_low_rank_q8(a.data(), r, kDim);
  const QuantRow x(kDim);
  std::vector<float> t(static_cast<size_t>(r));
  for (auto _ : state) {
    if (chunks) {
      std::fill(t.begin(), t.end(), 0.0f);
      low_rank_add_q8(packed, x.q.data(), x.sums.data(), 1.0f, t.data());
    } else {
      dot_tiles(tiles.data(), r, quant_blocks(kDim), x.q.data(), t.data());
    }
    benchmark::DoNotOptimize(t.data());
    benchmark::ClobberMemory();
  }
}

// The runtime's f32 path for B before stop 54: y [out] += scale * sum_k t[k] bt[k], 16 outputs at a time.
void add_low_rank_f32(float* y, const float* t, const float* bt, int64_t r, int64_t out, float scale) {
  constexpr int64_t kChunk = 16;
  for (int64_t o0 = 0; o0 < out; o0 += kChunk) {
    float acc[kChunk] = {};
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < kChunk; ++j) acc[j] = std::fma(t[k], bt[k * out + o0 + j], acc[j]);
    for (int64_t j = 0; j < kChunk; ++j) y[o0 + j] += scale * acc[j];
  }
}

void BM_lora_b(benchmark::State& state) {
  const bool int8 = state.range(0) == 1;
  const int64_t r = state.range(1);
  const std::vector<float> b = random_floats(kDim * r, 2), t = random_floats(r, 3);
  std::vector<float> bt(b.size());
  for (int64_t o = 0; o < kDim; ++o)
    for (int64_t k = 0; k < r; ++k) bt[k * kDim + o] = b[o * r + k];
  const LowRankQ8 packed = pack_low_rank_q8(quantised_rows(b, kDim, r).data(), kDim, r);
  std::vector<float> y(kDim, 0.0f);
  std::vector<BlockQ8> tq(static_cast<size_t>(quant_blocks(r)));
  std::vector<int32_t> sums(tq.size());
  for (auto _ : state) {
    if (int8) {
      // What the runtime does per row: quantise t, then the product.
      quantize_row_q8_sums(t.data(), tq.data(), sums.data(), r);
      low_rank_add_q8(packed, tq.data(), sums.data(), 0.5f, y.data());
    } else {
      add_low_rank_f32(y.data(), t.data(), bt.data(), r, kDim, 0.5f);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

void BM_base(benchmark::State& state) {
  constexpr int64_t kActive = 64;  // 2 of 8 blocks of 32
  const std::vector<TileQ8> w =
      tiles_of(quantised_rows(random_floats(kDim * kActive, 4), kDim, kActive), kDim, kActive);
  const QuantRow x(kActive);
  std::vector<float> y(kDim);
  for (auto _ : state) {
    dot_tiles(w.data(), kDim, quant_blocks(kActive), x.q.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

}  // namespace

BENCHMARK(BM_lora_a)->ArgsProduct({{0, 1}, {8, 32}})->ArgNames({"layout", "rank"});
BENCHMARK(BM_lora_b)->ArgsProduct({{0, 1}, {8, 32}})->ArgNames({"layout", "rank"});
BENCHMARK(BM_base);

BENCHMARK_MAIN();
