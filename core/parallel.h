#pragma once
// One global thread count for the whole process (the CLI's --threads N; default:
// every core), and the parallel loops kernels use. Kernels split work so that each
// output element is written by exactly one task and reductions run in a fixed
// order: results never depend on the thread count.
#include <cstdint>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "core/thread_sanitizer.h"

namespace shamn {

// n <= 0 means "all cores". Safe to call again to change the count.
void set_num_threads(int n);
int num_threads();
int hardware_threads();

namespace detail {
inline thread_local int serial_depth = 0;
}  // namespace detail

// While one is alive (and active), every parallel_for on this thread runs
// inline. For the body of a task that is already one of as many as there are
// threads (the runtime's row slices, its experts): loops inside it would only
// add task overhead.
class SerialScope {
 public:
  explicit SerialScope(bool active = true) : active_(active) { detail::serial_depth += active_ ? 1 : 0; }
  ~SerialScope() { detail::serial_depth -= active_ ? 1 : 0; }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool active_;
};

// Whether parallel_for on this thread runs inline (inside an active SerialScope).
inline bool in_serial_scope() { return detail::serial_depth > 0; }

// f(lo, hi) over [begin, end) in chunks of at least `grain` iterations.
// Runs inline when there is a single thread or a single chunk, or inside a SerialScope.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  if (end <= begin) return;
  if (grain < 1) grain = 1;
  if (num_threads() == 1 || end - begin <= grain || in_serial_scope()) {
    f(begin, end);
    return;
  }
  // The caller's writes happen before every task; every task's writes happen
  // before the return. oneTBB guarantees both; these tell ThreadSanitizer, which
  // also skips oneTBB's bookkeeping between bodies (core/thread_sanitizer.h).
  char fork_sync = 0, join_sync = 0;
  detail::tsan_observe_arena();
  const detail::TsanLoopJoin join(&join_sync);
  detail::tsan_release(&fork_sync);
  tbb::parallel_for(tbb::blocked_range<int64_t>(begin, end, grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      const detail::TsanTaskBody body(&fork_sync, &join_sync);
                      f(r.begin(), r.end());
                    });
}

// Deterministic sum: [begin, end) is cut into fixed chunks of `chunk` iterations
// (independent of the thread count); partial(lo, hi) -> double is computed per
// chunk in parallel and the partials are added in chunk order.
template <class F>
double parallel_sum(int64_t begin, int64_t end, int64_t chunk, F&& partial) {
  if (end <= begin) return 0.0;
  if (chunk < 1) chunk = 1;
  const int64_t n_chunks = (end - begin + chunk - 1) / chunk;
  std::vector<double> partials(static_cast<size_t>(n_chunks));
  parallel_for(0, n_chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t a = begin + c * chunk;
      const int64_t b = a + chunk < end ? a + chunk : end;
      partials[static_cast<size_t>(c)] = partial(a, b);
    }
  });
  double total = 0.0;
  for (double p : partials) total += p;
  return total;
}

}  // namespace shamn
