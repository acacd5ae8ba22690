#include <catch2/catch.hpp>

#include <atomic>
#include <vector>

#include "core/parallel.h"
#include "helpers.h"

using namespace shamn;

TEST_CASE("parallel_for covers the range exactly once", "[core][parallel]") {
  test::ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    CHECK(num_threads() == threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(0, 10007, 13, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) CHECK(h.load() == 1);
  }
  set_num_threads(0);
  CHECK(num_threads() == hardware_threads());
}

TEST_CASE("parallel_sum is bit-identical for any thread count", "[core][parallel]") {
  test::ThreadCountGuard guard;
  std::vector<double> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0 / (1.0 + static_cast<double>(i % 977));
  auto run = [&] {
    return parallel_sum(0, static_cast<int64_t>(values.size()), 4096, [&](int64_t lo, int64_t hi) {
      double s = 0;
      for (int64_t i = lo; i < hi; ++i) s += values[static_cast<size_t>(i)];
      return s;
    });
  };
  set_num_threads(1);
  const double one = run();
  set_num_threads(2);
  const double two = run();
  CHECK(one == two);
}

TEST_CASE("inside a SerialScope parallel_for runs the whole range inline", "[core][parallel]") {
  test::ThreadCountGuard guard;
  set_num_threads(2);
  const auto calls = [](int64_t n) {
    std::atomic<int> count{0};
    std::atomic<int64_t> covered{0};
    parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      count.fetch_add(1);
      covered.fetch_add(hi - lo);
    });
    CHECK(covered.load() == n);
    return count.load();
  };
  {
    const SerialScope serial;
    CHECK(calls(1000) == 1);
    {
      const SerialScope inactive(false);
      CHECK(calls(1000) == 1);  // still inside the outer scope
    }
    CHECK(calls(1000) == 1);
  }
  {
    const SerialScope inactive(false);
    // Not serial: 1000 single-iteration chunks on 2 threads are split (TBB's
    // auto partitioner always cuts a range this long at least once).
    CHECK(calls(1000) > 1);
  }
}
