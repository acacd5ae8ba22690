// The cost of one ProfileScope: off (what every op pays when --profile is not
// given), on without tracing (the table) and on while a step is traced (the
// table and a trace event). An empty body, so this is the scope alone; the
// per-step overhead is this times the scopes per step (see experiments/profiler.md).
// The *_work cases add what an op adds for the roofline: one profile_work() call
// (an op's FLOP and byte count) inside the scope.
//
//   bench_profiler --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "core/profiler.h"

namespace {

using shamn::ProfileCategory;
using shamn::ProfileScope;

void scope_off(benchmark::State& state) {
  shamn::stop_profiling();
  for (auto _ : state) {
    const ProfileScope scope("bench_scope", ProfileCategory::forward);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(scope_off);

void scope_off_work(benchmark::State& state) {
  shamn::stop_profiling();
  int64_t n = 1000;
  for (auto _ : state) {
    const ProfileScope scope("bench_scope", ProfileCategory::forward);
    benchmark::DoNotOptimize(n);
    shamn::profile_work(2 * n * n, 12 * n);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(scope_off_work);

void scope_on_work(benchmark::State& state) {
  shamn::start_profiling();
  int64_t n = 1000;
  for (auto _ : state) {
    const ProfileScope scope("bench_scope", ProfileCategory::forward);
    benchmark::DoNotOptimize(n);
    shamn::profile_work(2 * n * n, 12 * n);
    benchmark::ClobberMemory();
  }
  shamn::stop_profiling();
}
BENCHMARK(scope_on_work);

void scope_on(benchmark::State& state) {
  shamn::ProfileOptions options;
  options.trace_steps = state.range(0);
  shamn::start_profiling(options);
  shamn::profile_begin_step(1);
  for (auto _ : state) {
    const ProfileScope scope("bench_scope", ProfileCategory::forward);
    benchmark::ClobberMemory();
  }
  shamn::stop_profiling();
  shamn::start_profiling();  // frees the trace events
  shamn::stop_profiling();
}
BENCHMARK(scope_on)->Arg(0)->ArgName("traced");
// Below the per-thread event cap, so every iteration stores its event.
BENCHMARK(scope_on)->Arg(1)->ArgName("traced")->Iterations(1 << 19);

}  // namespace

BENCHMARK_MAIN();
