// HierarchicalMoE forward+backward per token at the SPEC default shapes
// (N = 4096 tokens, D = 512, 4 groups x 4 experts, top-2, hidden 512, block 32,
// sparsity 0.9), split into routing / expert GEMMs / combine, each stage timed
// forward + backward from leaf inputs, next to the whole layer.
#include <benchmark/benchmark.h>

#include "autograd/ops.h"
#include "autograd/ops_moe.h"
#include "core/kernels/block_sparse.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "layers/hierarchical_moe.h"

using namespace shamn;

namespace {

constexpr int64_t kTokens = 4096;

MoeOptions default_moe() {
  MoeOptions o;
  o.dim = 512;
  o.hidden = 512;
  o.up = {512, 512, 32, 0.9, true, "model.moe.sparsity"};
  o.down = {512, 512, 32, 0.9, true, "model.moe.sparsity"};
  return o;
}

struct Fixture {
  HierarchicalMoE moe{default_moe()};
  Tensor u = Tensor::empty({kTokens, 512});
  Fixture() {
    moe.init(1);
    Rng rng(2);
    rng.fill_normal(u, 0.0, 1.0);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

Tensor random_like(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  rng.fill_normal(t, 0.0, 1.0);
  return t;
}

void set_rate(benchmark::State& state) {
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(kTokens), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MoeLayer(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Fixture& f = fixture();
  Var u(f.u, true);
  const Tensor seed = random_like(f.u.shape(), 3);
  for (auto _ : state) {
    f.moe.zero_grad();
    const auto out = f.moe.forward(u);
    add(sum(mul(out.y, Var(seed))), out.aux).backward();
  }
  set_rate(state);
}

// The experts' routing decisions for the stages below, made once.
struct Routing {
  Tensor experts;
  MoeDispatch plan;
  Tensor gates;
};

Routing& routing() {
  static Routing r = [] {
    Fixture& f = fixture();
    NoGradGuard no_grad;
    const auto out = f.moe.forward(Var(f.u));
    Routing r;
    r.experts = out.experts;
    r.plan = plan_dispatch(out.experts, 16);
    r.gates = random_like({kTokens, 2}, 4);
    return r;
  }();
  return r;
}

void BM_MoeRouting(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Fixture& f = fixture();
  Var u(f.u, true);
  const MoeShape shape{4, 4, 1, 2};
  Var wg(random_like({4, 512}, 5), true), we(random_like({16, 512}, 6), true);
  for (auto _ : state) {
    Var rg = matmul(u, wg, false, true);
    Var P = router_probs(rg, matmul(u, we, false, true), shape);
    Tensor pg = Tensor::empty({kTokens, 4});
    softmax_rows(pg.data<float>(), rg.value().data<float>(), kTokens, int64_t{4});
    Tensor experts = Tensor::empty({kTokens, 2}, DType::i32);
    select_experts(experts.data<int32_t>(), pg.data<float>(), P.value().data<float>(), kTokens, shape);
    Var gates = moe_gates(P, experts);
    add(sum(gates), sum(P)).backward();
  }
  set_rate(state);
}

// Args: threads, then 0 for token tiles packed as before stop 66
// (set_block_sparse_rows_in_place), 1 for the default.
void BM_MoeExperts(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  set_block_sparse_rows_in_place(state.range(1) != 0);
  Fixture& f = fixture();
  Routing& r = routing();
  Var u(f.u, true);
  for (auto _ : state) {
    f.moe.zero_grad();
    sum(f.moe.experts_forward(u, r.plan)).backward();
  }
  set_rate(state);
  set_block_sparse_rows_in_place(true);
}

// The experts' forward alone, args as above.
void BM_MoeExpertsForward(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  set_block_sparse_rows_in_place(state.range(1) != 0);
  Fixture& f = fixture();
  Routing& r = routing();
  const Var u(f.u, false);
  const NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(f.moe.experts_forward(u, r.plan).value().data<float>());
  set_rate(state);
  set_block_sparse_rows_in_place(true);
}

void BM_MoeCombine(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  Routing& r = routing();
  Var rows(random_like({2 * kTokens, 512}, 10), true);
  Var gates(r.gates, true);
  const Tensor seed = random_like({kTokens, 512}, 7);
  for (auto _ : state) {
    Var y = moe_combine(rows, gates, r.plan);
    sum(mul(y, Var(seed))).backward();
  }
  set_rate(state);
}

}  // namespace

BENCHMARK(BM_MoeLayer)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoeRouting)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoeExperts)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoeExpertsForward)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MoeCombine)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
