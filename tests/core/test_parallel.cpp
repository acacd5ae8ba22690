#include <catch2/catch.hpp>

#include <algorithm>
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
  // The contract: chunk partials added in chunk order, whatever the threads.
  double chunk_order = 0;
  for (size_t lo = 0; lo < values.size(); lo += 4096) {
    double s = 0;
    for (size_t i = lo; i < std::min(lo + 4096, values.size()); ++i) s += values[i];
    chunk_order += s;
  }
  for (int threads : {1, 2, 3, 8}) {
    INFO(threads << " threads");
    set_num_threads(threads);
    CHECK(run() == chunk_order);
  }
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

// Under TSan (core/thread_sanitizer.h) a thread ignores its memory accesses
// between task bodies; a body run in that span, or a caller left in it after its
// loop, would hide our own races. Outside a TSan build the span never opens.
// (Not tested here: a loop whose task throws on another thread also ends the
// span; TSan reports the exception's transfer through libtbb itself.)
TEST_CASE("no task body and no caller after its loop runs inside oneTBB's bookkeeping span (1 and 2 threads)",
          "[core][parallel]") {
  test::ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::atomic<int> bodies_in_span{0};
    const auto body = [&](int64_t lo, int64_t hi) {
      if (detail::tsan_in_bookkeeping_span()) bodies_in_span.fetch_add(1);
      // A loop nested in a task: its return must leave this body out of the span too.
      parallel_for(lo, hi, 1, [&](int64_t, int64_t) {
        if (detail::tsan_in_bookkeeping_span()) bodies_in_span.fetch_add(1);
      });
      if (detail::tsan_in_bookkeeping_span()) bodies_in_span.fetch_add(1);
    };
    parallel_for(0, 256, 32, body);  // bodies of 32 or more, each a loop of its own
    CHECK(bodies_in_span.load() == 0);
    CHECK_FALSE(detail::tsan_in_bookkeeping_span());
  }
}
