// The byte-level BPE tokenizer on the Brown corpus (data/fetch_brown.sh), 1 and
// 2 threads:
//   encode        Tokenizer::encode of the whole text, with a tokenizer trained
//                 on it to vocab 8192 before timing; bytes/s of text (all threads)
//   count_chunks  the first training stage: distinct chunks and their counts
//   train_bpe     the whole training to vocab 8192 (count_chunks included)
// The text is read from $SHAMN_BROWN_TXT, default /tmp/brown.txt.
//
//   bench_tokenizer --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "core/parallel.h"
#include "data/tokenizer.h"

namespace {

struct Data {
  std::string text;
  shamn::Tokenizer tokenizer;

  Data() {
    const char* env = std::getenv("SHAMN_BROWN_TXT");
    std::ifstream in(env ? env : "/tmp/brown.txt", std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!text.empty()) tokenizer = shamn::Tokenizer::train(text, 8192);
  }
};

Data& data() {
  static Data instance;
  return instance;
}

// The text, or nullptr after telling the benchmark why it is missing.
const Data* setup(benchmark::State& state) {
  shamn::set_num_threads(static_cast<int>(state.range(0)));
  const Data& d = data();
  if (!d.text.empty()) return &d;
  state.SkipWithError("no text: run data/fetch_brown.sh /tmp/brown.txt or set SHAMN_BROWN_TXT");
  return nullptr;
}

void BM_Encode(benchmark::State& state) {
  const Data* dp = setup(state);
  if (!dp) return;
  const Data& d = *dp;
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<uint32_t> ids = d.tokenizer.encode(d.text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * d.text.size()));
  state.counters["bytes/token"] = static_cast<double>(d.text.size()) / static_cast<double>(tokens);
}

void BM_CountChunks(benchmark::State& state) {
  const Data* d = setup(state);
  if (!d) return;
  for (auto _ : state) benchmark::DoNotOptimize(shamn::count_chunks(d->text).size());
}

void BM_TrainBpe(benchmark::State& state) {
  const Data* d = setup(state);
  if (!d) return;
  for (auto _ : state) benchmark::DoNotOptimize(shamn::train_bpe(d->text, 8192).size());
}

BENCHMARK(BM_Encode)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->MeasureProcessCPUTime()->Unit(
    benchmark::kMillisecond);
BENCHMARK(BM_CountChunks)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainBpe)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
