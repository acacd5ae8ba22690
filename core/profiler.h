#pragma once
// The `--profile` profiler: RAII scopes that time what a command spends per op,
// per layer and per phase (forward, backward, optimizer, data, ...).
//
//   ProfileScope scope("block_sparse_linear", ProfileCategory::forward);
//
// Off (the default) a scope costs one predictable branch on a global flag: no
// clock read, no allocation, nothing stored. On, each scope reads the clock
// twice and, when it closes, adds its total and self time (total minus its
// children's) to its thread's table. Each thread has its own buffer, registered
// the first time it closes a scope, so TBB workers and the loader's prefetch
// thread need no setup. During the traced steps (profile_begin_step) every
// closed scope is also kept as an event for a Chrome trace.
//
// Work: an op that calls profile_work(flops, bytes) while it runs adds its
// arithmetic and the fewest bytes it must move to its innermost open scope, with
// the call's roofline bound (core/roofline.h) once set_profile_limits() has the
// machine's figures. A scope's work includes its children's, as its total time
// does, so a layer carries the sum of its ops and a step the sum of everything.
//
// Names must outlive the profiler's report: string literals, or strings kept by
// profile_intern().
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/roofline.h"

namespace shamn {

// comm: waiting for and exchanging data with the other ranks of a data-parallel run.
enum class ProfileCategory : uint8_t { forward, backward, optimizer, data, eval, infer, step, io, comm };
constexpr int kProfileCategories = 9;
const char* profile_category_name(ProfileCategory c);

namespace detail {
extern std::atomic<bool> g_profiling;
void add_profile_work(int64_t flops, int64_t bytes);
}  // namespace detail

inline bool profiling() { return detail::g_profiling.load(std::memory_order_relaxed); }

// Work of the op running on this thread (see above); one flag test when off.
// Call it on the op's own thread, not from inside its parallel tasks.
inline void profile_work(int64_t flops, int64_t bytes) {
  if (profiling()) [[unlikely]]
    detail::add_profile_work(flops, bytes);
}

// The limits each call's bound is computed from; kept across start_profiling().
// Default: none (bounds stay 0 and the table leaves the roofline out).
void set_profile_limits(const RooflineLimits& limits);
const RooflineLimits& profile_limits();

class ProfileScope {
 public:
  ProfileScope(const char* name, ProfileCategory category) {
    if (profiling()) [[unlikely]]
      open(name, category);
  }
  ~ProfileScope() {
    if (active_) [[unlikely]]
      close();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void open(const char* name, ProfileCategory category);
  void close();

  bool active_ = false;
  bool traced_ = false;
  ProfileCategory category_{};
  const char* name_ = nullptr;
  int64_t start_ns_ = 0;
  int64_t child_ns_ = 0;
  ProfileScope* parent_ = nullptr;
  // Work of this scope and its children (profile_work), and the sum of its calls' bounds.
  int64_t flops_ = 0, bytes_ = 0;
  int64_t level_bytes_[kMemoryLevels] = {};  // bytes_ by the level the rule put them in
  double bound_ns_ = 0;
  // The part recorded in this scope itself.
  double self_bound_ns_ = 0;

  friend class ProfileLayerScope;
  friend void detail::add_profile_work(int64_t, int64_t);
};

// f() timed as one scope: for a call whose result outlives the scope.
template <class F>
decltype(auto) profiled(const char* name, ProfileCategory category, F&& f) {
  const ProfileScope scope(name, category);
  return f();
}

// Consecutive phases of one function, each timed as a scope of its own
// without nesting the code in blocks: next() closes the current phase and
// opens the next one; the last closes with this object.
class ProfilePhases {
 public:
  ProfilePhases(const char* first, ProfileCategory category) : category_(category) { next(first); }
  void next(const char* name) {
    scope_.reset();
    scope_.emplace(name, category_);
  }

 private:
  ProfileCategory category_;
  std::optional<ProfileScope> scope_;
};

// A scope for one layer of a model ("layers.3.moe"): autograd nodes recorded
// inside it remember the name so their backward is attributed to the layer.
class ProfileLayerScope {
 public:
  ProfileLayerScope(const char* name, ProfileCategory category);
  ~ProfileLayerScope();
  ProfileLayerScope(const ProfileLayerScope&) = delete;
  ProfileLayerScope& operator=(const ProfileLayerScope&) = delete;

 private:
  ProfileScope scope_;
  const char* outer_layer_ = nullptr;
};

// The innermost open layer scope's name on this thread, or null.
const char* profile_current_layer();

// A stable copy of `name` (for names built at run time, like "layers.3.moe").
const char* profile_intern(const std::string& name);

// The name this thread gets in the trace (default "thread N").
void set_profile_thread_name(const char* name);

struct ProfileOptions {
  // Steps traced: the `trace_steps` steps after the first (a warm-up step), or
  // the first alone when the run has only one.
  int64_t trace_steps = 3;
  // Steps left out of the table: when step warmup_steps + 1 begins, the totals
  // so far are dropped and the wall clock restarts, so the table is the steady
  // state (a process's first step pays for first-touch page faults and
  // allocations). A run that never reaches that step keeps all of it. A scope
  // open across that moment counts whole.
  int64_t warmup_steps = 0;
  // Nanoseconds from any fixed origin; null = std::chrono::steady_clock.
  int64_t (*clock)() = nullptr;
};

// One timed name: every scope with this name and category, on every thread.
struct ProfileStat {
  std::string name;
  ProfileCategory category{};
  int64_t calls = 0;
  int64_t total_ns = 0;  // summed durations (a scope nested in itself counts twice)
  int64_t self_ns = 0;   // total minus the time in child scopes
  // Work (profile_work) of these scopes and their children; bound_ns sums each
  // call's roofline bound, self_bound_ns only the calls recorded in the scope itself.
  int64_t flops = 0, bytes = 0;
  int64_t level_bytes[kMemoryLevels] = {};  // bytes by level (all DRAM without limits)
  double bound_ns = 0, self_bound_ns = 0;
};

struct ProfileEvent {
  const char* name;
  ProfileCategory category;
  int64_t begin_ns;  // since start_profiling()
  int64_t duration_ns;
};

struct ProfileThread {
  int tid = 0;  // 1, 2, ... in order of first use
  std::string name;
  std::vector<ProfileEvent> events;  // in closing order
};

struct ProfileReport {
  int64_t wall_ns = 0;             // from the table's first step (or start_profiling()) to the report
  std::vector<ProfileStat> stats;  // by total time, longest first
  std::vector<ProfileThread> threads;
  int64_t first_traced_step = 0, last_traced_step = 0;  // 0 = none
  // The steps the table covers (last 0: no step begun) and the warm-up it left out.
  int64_t table_first_step = 1, table_last_step = 0;
  int64_t warmup_ns = 0;
  int64_t dropped_events = 0;  // past the per-thread cap
  RooflineLimits limits;       // what the bounds were computed from
};

// Clears everything recorded so far and turns the scopes on.
void start_profiling(const ProfileOptions& options = {});
// Turns the scopes off (what is recorded stays for profile_report()).
void stop_profiling();
// Marks the start of step `step` (1, 2, ... in this process), which decides
// whether the scopes that open from now on are traced. Free when profiling is off.
void profile_begin_step(int64_t step);
// What was recorded since start_profiling(); safe while other threads still run.
ProfileReport profile_report();

}  // namespace shamn
