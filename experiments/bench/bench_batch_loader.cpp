// BatchLoader::next() throughput in tokens/s (B*T per batch) on a ~100 MB llm.c token
// file (50 M uint16 tokens < 32000), B = 8 and 96 at T = 512, with and without the
// prefetch thread, 1 and 2 threads. The caller does no work between batches, so this
// is the loader's own rate; with prefetch it overlaps building batch i+1 with the
// hand-over of batch i. next_batch_after_work times only next() when the caller
// works 1 ms between batches, as a trainer does (for far longer). The file is
// written once to $TMPDIR (or /tmp) and is then in the page cache: this measures the
// loader, not the disk.
//
//   bench_batch_loader --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "data/batch_loader.h"
#include "data/token_file.h"

namespace {

constexpr int64_t kTokens = 50'000'000;
constexpr int64_t kVocab = 32000;

std::shared_ptr<const shamn::TokenFile> token_file() {
  static const std::shared_ptr<const shamn::TokenFile> file = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path path =
        std::filesystem::path(tmp ? tmp : "/tmp") / "shamn_bench_batch_loader.bin";
    if (!std::filesystem::exists(path) ||
        std::filesystem::file_size(path) != 1024 + 2 * static_cast<uintmax_t>(kTokens)) {
      std::mt19937 gen(1);
      std::vector<uint32_t> tokens(static_cast<size_t>(kTokens));
      for (uint32_t& t : tokens) t = gen() % kVocab;
      shamn::write_token_file(path.string(), tokens);
    }
    return std::make_shared<const shamn::TokenFile>(path.string());
  }();
  return file;
}

void next_batch(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1);
  const bool prefetch = state.range(2) != 0;
  shamn::set_num_threads(static_cast<int>(state.range(3)));
  shamn::BatchLoader loader(token_file(), kVocab, B, T, 1, prefetch);
  for (auto _ : state) {
    shamn::Batch batch = loader.next();
    benchmark::DoNotOptimize(batch.inputs.raw_data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(B * T), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(next_batch)
    ->ArgNames({"B", "T", "prefetch", "threads"})
    ->ArgsProduct({{8, 96}, {512}, {0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// What the trainer sees: the caller works for 1 ms between batches (a stand-in for a
// training step, which is far longer) and only the time spent inside next() is timed.
// With prefetch the batch is ready by then, so next() only hands it over.
void next_batch_after_work(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1);
  shamn::set_num_threads(1);
  shamn::BatchLoader loader(token_file(), kVocab, B, T, 1, state.range(2) != 0);
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const Clock::time_point work_end = Clock::now() + std::chrono::milliseconds(1);
    while (Clock::now() < work_end) {
    }
    const Clock::time_point start = Clock::now();
    shamn::Batch batch = loader.next();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
    benchmark::DoNotOptimize(batch.inputs.raw_data());
  }
}

BENCHMARK(next_batch_after_work)
    ->ArgNames({"B", "T", "prefetch"})
    ->ArgsProduct({{8, 96}, {512}, {0, 1}})
    ->UseManualTime()
    ->Iterations(2000)  // else it would run until 0.5 s were spent inside next()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
