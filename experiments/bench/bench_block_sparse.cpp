// BlockSparseLinear forward + backward (forward with bias, grad input, grad values,
// grad bias) at N = 4096 tokens, next to the dense baseline: shamn::gemm forward
// (y = x W^T) and both backward GEMMs (dx = dy W, dW = dy^T x) on the same shape.
//
// Names (each followed by /process_time/real_time):
//         sparse/in<in>_out<out>/b<block>/s<sparsity>/threads:<n>
//         dense/in<in>_out<out>/threads:<n>
//         part/<kernel>/in<in>_out<out>/b<block>/s<sparsity>/threads:<n>  (one kernel)
//         part_bf16/<kernel>/...  (the same under train.precision = "bf16", sparsity 0.9;
//                                  part_bf16_emulated/: without vdpbf16ps)
//         part_packed/<kernel>/... (sparsity 0.9; grad_values with every band
//                                  packed, forward and grad_input with their token
//                                  tiles packed: the baselines of the in-place reads)
// Counter FLOPs: effective rate counting only active blocks, 6*N*active_weights per
// iteration for fwd+bwd (2*N*active_weights for one product kernel, N*out for
// grad_bias), 1000-based: "85.2G/s".
//
//   bench_block_sparse --benchmark_filter='^(sparse|dense)/' --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
//       --benchmark_out=bsr.json --benchmark_out_format=json
//   python3 experiments/bench/block_sparse_table.py bsr.json
// Results and their discussion: experiments/block_sparse.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_inputs.h"
#include "core/gemm.h"
#include "core/kernels/block_sparse.h"
#include "core/parallel.h"
#include "core/product_precision.h"

namespace {

constexpr int64_t kTokens = 4096;

struct Layer {
  int64_t in, out;
};
const Layer kLayers[] = {{512, 512}, {512, 2048}};
const int64_t kBlocks[] = {16, 32, 64};
const double kSparsities[] = {0.0, 0.5, 0.75, 0.9, 0.95};

using shamn::bench::random_floats;

struct SparseOperands {
  shamn::BlockSparseDims d;
  std::vector<int32_t> col_index;
  std::vector<float> x, values, bias, y, dy, dx, dvalues, dbias;

  SparseOperands(const Layer& layer, int64_t block, double sparsity) {
    d.in = layer.in;
    d.out = layer.out;
    d.block = block;
    const int64_t nib = d.col_blocks();
    d.active = std::max<int64_t>(1, std::llround((1.0 - sparsity) * static_cast<double>(nib)));
    std::mt19937 rng(7);
    for (int64_t r = 0; r < d.row_blocks(); ++r) {
      std::vector<int32_t> cols(static_cast<size_t>(nib));
      for (int64_t c = 0; c < nib; ++c) cols[static_cast<size_t>(c)] = static_cast<int32_t>(c);
      std::shuffle(cols.begin(), cols.end(), rng);
      cols.resize(static_cast<size_t>(d.active));
      std::sort(cols.begin(), cols.end());
      col_index.insert(col_index.end(), cols.begin(), cols.end());
    }
    shamn::check_block_pattern(col_index.data(), d);
    x = random_floats(kTokens * d.in, 1);
    values = random_floats(d.value_count(), 2);
    bias = random_floats(d.out, 3);
    dy = random_floats(kTokens * d.out, 4);
    y.assign(static_cast<size_t>(kTokens * d.out), 0.0f);
    dx.assign(static_cast<size_t>(kTokens * d.in), 0.0f);
    dvalues.assign(static_cast<size_t>(d.value_count()), 0.0f);
    dbias.assign(static_cast<size_t>(d.out), 0.0f);
  }
  double active_weights() const { return static_cast<double>(d.value_count()); }
};

void set_flops(benchmark::State& state, double flops) {
  state.counters["FLOPs"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::OneK::kIs1000);
}

void bm_sparse(benchmark::State& state, Layer layer, int64_t block, double sparsity) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  SparseOperands op(layer, block, sparsity);
  for (auto _ : state) {
    shamn::block_sparse_forward(op.y.data(), op.x.data(), op.values.data(), op.col_index.data(),
                                op.bias.data(), kTokens, op.d);
    shamn::block_sparse_backward_input(op.dx.data(), op.dy.data(), op.values.data(), op.col_index.data(),
                                       kTokens, op.d);
    shamn::block_sparse_backward_values(op.dvalues.data(), op.dy.data(), op.x.data(), op.col_index.data(),
                                        kTokens, op.d);
    shamn::block_sparse_backward_bias(op.dbias.data(), op.dy.data(), kTokens, op.d);
    benchmark::DoNotOptimize(op.y.data());
    benchmark::DoNotOptimize(op.dvalues.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 6.0 * kTokens * op.active_weights());
  state.counters["active"] = static_cast<double>(op.d.active);
}

enum class Part { forward, grad_input, grad_values, grad_bias };

// pack_readers: set_grad_values_pack_readers (0: the default; 1 packs every band);
// rows_in_place: set_block_sparse_rows_in_place.
void bm_part(benchmark::State& state, Layer layer, int64_t block, double sparsity, Part part,
             shamn::ProductPrecision p, bool native, int64_t pack_readers, bool rows_in_place) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  shamn::allow_bf16_dot_native(native);
  shamn::set_grad_values_pack_readers(pack_readers);
  shamn::set_block_sparse_rows_in_place(rows_in_place);
  SparseOperands op(layer, block, sparsity);
  for (auto _ : state) {
    if (part == Part::forward)
      shamn::block_sparse_forward(op.y.data(), op.x.data(), op.values.data(), op.col_index.data(),
                                  op.bias.data(), kTokens, op.d, p);
    if (part == Part::grad_input)
      shamn::block_sparse_backward_input(op.dx.data(), op.dy.data(), op.values.data(), op.col_index.data(),
                                         kTokens, op.d, p);
    if (part == Part::grad_values)
      shamn::block_sparse_backward_values(op.dvalues.data(), op.dy.data(), op.x.data(), op.col_index.data(),
                                          kTokens, op.d, p);
    if (part == Part::grad_bias)
      shamn::block_sparse_backward_bias(op.dbias.data(), op.dy.data(), kTokens, op.d);
    benchmark::DoNotOptimize(op.dvalues.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, part == Part::grad_bias ? static_cast<double>(kTokens * op.d.out)
                                           : 2.0 * kTokens * op.active_weights());
  shamn::set_grad_values_pack_readers(0);
  shamn::set_block_sparse_rows_in_place(true);
}

struct DenseOperands {
  std::vector<float> x, w, y, dy, dx, dw;
  explicit DenseOperands(const Layer& l)
      : x(random_floats(kTokens * l.in, 1)),
        w(random_floats(l.out * l.in, 2)),
        y(static_cast<size_t>(kTokens * l.out)),
        dy(random_floats(kTokens * l.out, 4)),
        dx(static_cast<size_t>(kTokens * l.in)),
        dw(static_cast<size_t>(l.out * l.in)) {}
};

void dense_step(DenseOperands& op, const Layer& l, int which) {
  using shamn::Trans;
  if (which < 0 || which == 0)  // y[N, out] = x[N, in] W[out, in]^T
    shamn::gemm(Trans::no, Trans::yes, kTokens, l.out, l.in, 1.0f, op.x.data(), l.in, op.w.data(), l.in, 0.0f,
                op.y.data(), l.out);
  if (which < 0 || which == 1)  // dx[N, in] = dy[N, out] W[out, in]
    shamn::gemm(Trans::no, Trans::no, kTokens, l.in, l.out, 1.0f, op.dy.data(), l.out, op.w.data(), l.in,
                0.0f, op.dx.data(), l.in);
  if (which < 0 || which == 2)  // dW[out, in] = dy[N, out]^T x[N, in]
    shamn::gemm(Trans::yes, Trans::no, l.out, l.in, kTokens, 1.0f, op.dy.data(), l.out, op.x.data(), l.in,
                0.0f, op.dw.data(), l.in);
}

void bm_dense(benchmark::State& state, Layer layer, int which) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  DenseOperands op(layer);
  for (auto _ : state) {
    dense_step(op, layer, which);
    benchmark::DoNotOptimize(op.dw.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, (which < 0 ? 6.0 : 2.0) * kTokens * static_cast<double>(layer.in * layer.out));
}

std::string shape_name(const Layer& l) {
  return "in" + std::to_string(l.in) + "_out" + std::to_string(l.out);
}

void finish(benchmark::internal::Benchmark* b, int threads) {
  // Process CPU time (all threads) beside real time: on a shared machine the CPU
  // column of a 1-thread run is the figure least disturbed by other processes.
  b->ArgName("threads")->Arg(threads)->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
}

int register_all() {
  const char* part_names[] = {"forward", "grad_input", "grad_values", "grad_bias"};
  for (int threads : {1, 2})
    for (const Layer& l : kLayers) {
      finish(benchmark::RegisterBenchmark(("dense/" + shape_name(l)).c_str(), bm_dense, l, -1), threads);
      for (int64_t block : kBlocks)
        for (double s : kSparsities) {
          char sp[16];
          std::snprintf(sp, sizeof(sp), "s%.2f", s);
          const std::string name = "sparse/" + shape_name(l) + "/b" + std::to_string(block) + "/" + sp;
          finish(benchmark::RegisterBenchmark(name.c_str(), bm_sparse, l, block, s), threads);
        }
      // Per-kernel figures at sparsity 0 and 0.9 (filter with --benchmark_filter=part/).
      for (int p = 0; p < 4; ++p) {
        const std::string part = "part/" + std::string(part_names[p]) + "/" + shape_name(l);
        if (p < 3) finish(benchmark::RegisterBenchmark((part + "/dense").c_str(), bm_dense, l, p), threads);
        for (int64_t block : kBlocks)
          for (double s : {0.0, 0.9}) {
            char sp[16];
            std::snprintf(sp, sizeof(sp), "s%.2f", s);
            finish(benchmark::RegisterBenchmark((part + "/b" + std::to_string(block) + "/" + sp).c_str(),
                                                bm_part, l, block, s, static_cast<Part>(p),
                                                shamn::ProductPrecision::f32, true, 0, true),
                   threads);
          }
        // Grad values with both operands packed whatever their readers (the
        // kernel before stop 39), forward and grad input with packed token tiles
        // (before stop 66), beside part/ at the same shapes.
        if (p < 3)
          for (int64_t block : kBlocks)
            finish(benchmark::RegisterBenchmark(("part_packed/" + std::string(part_names[p]) + "/" +
                                                 shape_name(l) + "/b" + std::to_string(block) + "/s0.90")
                                                    .c_str(),
                                                bm_part, l, block, 0.9, static_cast<Part>(p),
                                                shamn::ProductPrecision::f32, true, p == 2 ? 1 : 0, p == 2),
                   threads);
        // The same products under train.precision = "bf16": on vdpbf16ps where the
        // CPU has it, and on its f32 emulation.
        if (p < 3)
          for (int64_t block : kBlocks)
            for (bool native : {true, false})
              finish(benchmark::RegisterBenchmark(
                         ((native ? "part_bf16/" : "part_bf16_emulated/") + std::string(part_names[p]) + "/" +
                          shape_name(l) + "/b" + std::to_string(block) + "/s0.90")
                             .c_str(),
                         bm_part, l, block, 0.9, static_cast<Part>(p), shamn::ProductPrecision::bf16, native,
                         0, true),
                     threads);
      }
    }
  return 0;
}

const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
