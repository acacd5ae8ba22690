#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/parallel.h"
#include "data/batch_loader.h"
#include "data/data_helpers.h"
#include "helpers.h"

namespace shamn {
namespace {

// A token file with tokens[i] = value(i).
template <class F>
std::shared_ptr<const TokenFile> make_file(const std::string& name, int64_t count, F value) {
  const auto path = test::data_temp_dir(name) / "tokens.bin";
  std::vector<uint32_t> tokens(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) tokens[static_cast<size_t>(i)] = value(i);
  write_token_file(path.string(), tokens);
  return std::make_shared<const TokenFile>(path.string());
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * 4) == 0;
}

bool same(const Batch& a, const Batch& b) {
  return a.index == b.index && same(a.inputs, b.inputs) && same(a.targets, b.targets);
}

std::vector<Batch> take(BatchLoader& loader, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(loader.next());
  return out;
}

uint32_t scrambled(int64_t i) { return static_cast<uint32_t>((i * 2654435761u) % 5000); }

}  // namespace

TEST_CASE("batches are shifted windows at the sampled starts", "[data][batch_loader]") {
  const int64_t size = 3000, B = 6, T = 17;
  const auto file = make_file("shifted", size, [](int64_t i) { return static_cast<uint32_t>(i); });
  BatchLoader loader(file, size, B, T, 42);
  for (uint64_t i = 0; i < 5; ++i) {
    const Batch b = loader.next();
    CHECK(b.index == i);
    CHECK(loader.position() == i + 1);
    REQUIRE(b.inputs.shape() == Shape{B, T});
    REQUIRE(b.targets.shape() == Shape{B, T});
    CHECK(b.inputs.dtype() == DType::i32);
    const std::vector<int64_t> starts = random_window_starts(42, i, B, size - T);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        CHECK(b.inputs.data<int32_t>()[r * T + t] == starts[static_cast<size_t>(r)] + t);
        CHECK(b.targets.data<int32_t>()[r * T + t] == starts[static_cast<size_t>(r)] + t + 1);
      }
  }
}

TEST_CASE("batch i does not depend on prefetching or the thread count", "[data][batch_loader]") {
  test::ThreadCountGuard guard;
  const auto file = make_file("determinism", 200000, scrambled);
  std::vector<std::vector<Batch>> runs;
  for (int threads : {1, 2})
    for (bool prefetch : {false, true}) {
      set_num_threads(threads);
      // 1,024 rows of 65 tokens: more than one 16,384-token task, so 2 threads split a batch.
      BatchLoader loader(file, 5000, 1024, 64, 7, prefetch);
      runs.push_back(take(loader, 12));
    }
  for (size_t run = 1; run < runs.size(); ++run)
    for (size_t i = 0; i < runs[0].size(); ++i) {
      INFO("run " << run << " batch " << i);
      CHECK(same(runs[run][i], runs[0][i]));
    }
  CHECK_FALSE(same(runs[0][0].inputs, runs[0][1].inputs));
  BatchLoader other_seed(file, 5000, 1024, 64, 8);
  CHECK_FALSE(same(other_seed.next().inputs, runs[0][0].inputs));
}

TEST_CASE("seek(k) then next() gives the k-th batch of a fresh loader", "[data][batch_loader]") {
  const auto file = make_file("seek", 5000, scrambled);
  BatchLoader fresh(file, 5000, 4, 32, 3, false);
  const std::vector<Batch> expected = take(fresh, 10);
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    BatchLoader resumed(file, 5000, 4, 32, 3, prefetch);
    resumed.seek(7);
    CHECK(resumed.position() == 7);
    CHECK(same(resumed.next(), expected[7]));
    CHECK(same(resumed.next(), expected[8]));
    resumed.seek(2);  // back, discarding the prefetched batch 9
    CHECK(same(resumed.next(), expected[2]));
    CHECK(resumed.position() == 3);
    resumed.seek(9);
    resumed.seek(5);  // two seeks in a row: only the last counts
    CHECK(same(resumed.next(), expected[5]));
  }
}

TEST_CASE("share() hands a rank its consecutive block of every period", "[data][batch_loader]") {
  const auto file = make_file("share", 5000, scrambled);
  BatchLoader fresh(file, 5000, 4, 32, 3, false);
  const std::vector<Batch> expected = take(fresh, 20);
  for (bool prefetch : {false, true}) {
    INFO("prefetch " << prefetch);
    // Rank 1 of 2 with 4 micro-batches per step, resumed after the step at batch 6:
    // of [6, 10) it takes 8 and 9, of [10, 14) 12 and 13, ...
    BatchLoader rank1(file, 5000, 4, 32, 3, prefetch);
    rank1.share(6, 4, 2, 2);
    rank1.seek(6);
    CHECK(rank1.position() == 8);
    for (int64_t want : {8, 9, 12, 13, 16, 17}) {
      INFO("batch " << want);
      CHECK(same(rank1.next(), expected[static_cast<size_t>(want)]));
    }
    CHECK(rank1.position() == 20);
    // Rank 0 of 4 with 4 micro-batches from the start: 0, 4, 8, ...
    BatchLoader rank0(file, 5000, 4, 32, 3, prefetch);
    rank0.share(0, 4, 0, 1);
    for (int64_t want : {0, 4, 8}) CHECK(same(rank0.next(), expected[static_cast<size_t>(want)]));
  }
  BatchLoader bad(file, 5000, 4, 32, 3, false);
  CHECK_THROWS(bad.share(0, 4, 3, 2));
}

TEST_CASE("window starts reach every position, the last valid one included", "[data][batch_loader]") {
  const int64_t size = 40, T = 8;
  const auto file = make_file("coverage", size, [](int64_t i) { return static_cast<uint32_t>(i); });
  BatchLoader loader(file, size, 4, T, 11);
  std::set<int32_t> starts;
  for (int i = 0; i < 500; ++i) {
    const Batch b = loader.next();
    for (int64_t r = 0; r < 4; ++r) starts.insert(b.inputs.data<int32_t>()[r * T]);
  }
  CHECK(*starts.begin() == 0);
  CHECK(*starts.rbegin() == size - T - 1);
  CHECK(starts.size() == static_cast<size_t>(size - T));
}

TEST_CASE("a bad token in a prefetched batch is an InputError from next()", "[data][batch_loader]") {
  // Only the window starting at 55 holds the bad last token; pick a seed whose batch 0
  // misses it and whose batch 1 (built by the prefetch thread) reaches it.
  const int64_t size = 64, T = 8;
  const auto file =
      make_file("bad_token", size, [](int64_t i) { return static_cast<uint32_t>(i == 63 ? 999 : i); });
  uint64_t seed = 0;
  while (random_window_starts(seed, 0, 1, size - T)[0] == 55 ||
         random_window_starts(seed, 1, 1, size - T)[0] != 55)
    ++seed;
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    BatchLoader loader(file, 100, 1, T, seed, prefetch);
    CHECK_NOTHROW(loader.next());
    if (prefetch) {
      // Let the prefetch thread hit the bad token, so next() rethrows its error.
      loader.wait_prefetched();
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      CHECK_THROWS_AS(loader.next(), InputError);
      CHECK_THROWS_WITH(loader.next(), Catch::Contains("'" + file->path() + "'") &&
                                           Catch::Contains("token 999 at index 63") &&
                                           Catch::Contains("byte offset 1150"));
    }
    CHECK(loader.position() == 1);
  }
}

TEST_CASE("loader arguments are checked", "[data][batch_loader]") {
  const auto file = make_file("args", 20, [](int64_t i) { return static_cast<uint32_t>(i); });
  CHECK_THROWS_WITH(BatchLoader(file, 20, 2, 20, 0),
                    Catch::Contains("'" + file->path() + "' has 20 tokens") &&
                        Catch::Contains("one window of seq + 1 = 21 tokens"));
  CHECK_NOTHROW(BatchLoader(file, 20, 2, 19, 0));
  CHECK_THROWS_AS(BatchLoader(file, 0, 2, 4, 0), InputError);
  CHECK_THROWS_AS(BatchLoader(file, 20, 0, 4, 0), InputError);
  CHECK_THROWS_AS(BatchLoader(file, 20, 2, 0, 0), InputError);
  CHECK_THROWS_AS(BatchLoader(file, 20, 2, -1, 0), InputError);
}

TEST_CASE("sequential batches tile the file in order", "[data][batch_loader]") {
  test::ThreadCountGuard guard;
  const int64_t size = 1000, B = 4, T = 16;
  const auto file = make_file("sequential", size, [](int64_t i) { return static_cast<uint32_t>(i); });
  const int64_t count = sequential_batch_count(*file, B, T);
  CHECK(count == (size - 1) / T / B);
  int64_t next_token = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Batch b = sequential_batch(*file, size, B, T, i);
    CHECK(b.index == static_cast<uint64_t>(i));
    for (int64_t k = 0; k < B * T; ++k) {
      CHECK(b.inputs.data<int32_t>()[k] == next_token);
      CHECK(b.targets.data<int32_t>()[k] == next_token + 1);
      ++next_token;
    }
    set_num_threads(1);
    CHECK(same(sequential_batch(*file, size, B, T, i), b));
    set_num_threads(0);
  }
  CHECK(sequential_batch_count(*file, 1, size - 1) == 1);
  CHECK_THROWS_WITH(sequential_batch_count(*file, 63, T),
                    Catch::Contains("62 windows") && Catch::Contains("fewer than one batch of 63"));
  CHECK_THROWS_AS(sequential_batch(*file, size, B, T, count), Error);
  CHECK_THROWS_WITH(sequential_batch(*file, 990, 1, T, 61), Catch::Contains("token 990 at index 990"));
}

}  // namespace shamn
