#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace shamn {

namespace detail {
std::atomic<bool> g_profiling{false};
}  // namespace detail

namespace {

// A traced thread keeps at most this many events (32 MiB): a trace of a few
// steps stays far below it, a mistaken --profile-steps 100000 cannot eat memory.
constexpr size_t kMaxEventsPerThread = size_t{1} << 20;

struct StatKey {
  const char* name;
  ProfileCategory category;
  bool operator==(const StatKey& o) const { return name == o.name && category == o.category; }
};
struct StatKeyHash {
  size_t operator()(const StatKey& k) const {
    return std::hash<const void*>()(k.name) * 31 + static_cast<size_t>(k.category);
  }
};
static_assert(kMemoryLevels == 3, "profile_report() copies the bytes of three levels");

struct Totals {
  int64_t calls = 0, total_ns = 0, self_ns = 0;
  int64_t flops = 0, bytes = 0;
  int64_t level_bytes[kMemoryLevels] = {};
  double bound_ns = 0, self_bound_ns = 0;
};

// One per thread that ever closed a scope while profiling. Written by its
// thread, read by profile_report(), hence the (uncontended) mutex.
struct ThreadBuffer {
  std::mutex mutex;
  int tid = 0;
  std::string name;
  // Keyed by the name's address: the same literal in two files may have two
  // addresses, so the report merges by the name's text.
  std::unordered_map<StatKey, Totals, StatKeyHash> totals;
  std::vector<ProfileEvent> events;
  int64_t dropped = 0;
};

std::mutex g_registry_mutex;
std::vector<std::unique_ptr<ThreadBuffer>> g_buffers;  // never freed: threads keep raw pointers
std::atomic<bool> g_tracing{false};
int64_t g_trace_steps = 3;
int64_t g_first_traced = 0, g_last_traced = 0;
int64_t g_warmup_steps = 0;
int64_t g_table_first = 1, g_last_step = 0;
// Atomic (relaxed) because a thread may open a scope while another starts a profile.
std::atomic<int64_t (*)()> g_clock{nullptr};
std::atomic<int64_t> g_origin_ns{0};
int64_t g_table_origin_ns = 0;
RooflineLimits g_limits;  // set between runs, read by scopes while profiling

thread_local ThreadBuffer* tl_buffer = nullptr;
thread_local ProfileScope* tl_open = nullptr;  // innermost active scope
thread_local const char* tl_layer = nullptr;
thread_local const char* tl_thread_name = nullptr;

int64_t now_ns() {
  if (const auto clock = g_clock.load(std::memory_order_relaxed)) return clock();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ThreadBuffer& this_thread_buffer() {
  if (tl_buffer) return *tl_buffer;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto buffer = std::make_unique<ThreadBuffer>();
  buffer->tid = static_cast<int>(g_buffers.size()) + 1;
  buffer->name = tl_thread_name ? tl_thread_name : "thread " + std::to_string(buffer->tid);
  tl_buffer = buffer.get();
  g_buffers.push_back(std::move(buffer));
  return *tl_buffer;
}

void clear_totals_locked() {
  for (auto& b : g_buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->totals.clear();
  }
}

void clear_events_locked() {
  for (auto& b : g_buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->events.clear();
    b->dropped = 0;
  }
}

}  // namespace

const char* profile_category_name(ProfileCategory c) {
  static const char* const names[kProfileCategories] = {"forward", "backward", "optimizer", "data", "eval",
                                                        "infer",   "step",     "io",        "comm"};
  return names[static_cast<int>(c)];
}

void ProfileScope::open(const char* name, ProfileCategory category) {
  active_ = true;
  traced_ = g_tracing.load(std::memory_order_relaxed);
  name_ = name;
  category_ = category;
  parent_ = tl_open;
  tl_open = this;
  start_ns_ = now_ns();
}

void ProfileScope::close() {
  const int64_t duration = now_ns() - start_ns_;
  tl_open = parent_;
  if (parent_) {
    parent_->child_ns_ += duration;
    parent_->flops_ += flops_;
    parent_->bytes_ += bytes_;
    for (int l = 0; l < kMemoryLevels; ++l) parent_->level_bytes_[l] += level_bytes_[l];
    parent_->bound_ns_ += bound_ns_;
  }
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  Totals& t = b.totals[StatKey{name_, category_}];
  ++t.calls;
  t.total_ns += duration;
  t.self_ns += duration - child_ns_;
  t.flops += flops_;
  t.bytes += bytes_;
  for (int l = 0; l < kMemoryLevels; ++l) t.level_bytes[l] += level_bytes_[l];
  t.bound_ns += bound_ns_;
  t.self_bound_ns += self_bound_ns_;
  if (!traced_) return;
  if (b.events.size() < kMaxEventsPerThread)
    b.events.push_back({name_, category_, start_ns_ - g_origin_ns.load(std::memory_order_relaxed), duration});
  else
    ++b.dropped;
}

namespace detail {
void add_profile_work(int64_t flops, int64_t bytes) {
  ProfileScope* scope = tl_open;
  if (!scope) return;  // work outside every scope belongs to no row
  const double bound = roofline_bound_ns(static_cast<double>(flops), static_cast<double>(bytes), g_limits);
  scope->flops_ += flops;
  scope->bytes_ += bytes;
  scope->level_bytes_[static_cast<int>(memory_level(static_cast<double>(bytes), g_limits))] += bytes;
  scope->bound_ns_ += bound;
  scope->self_bound_ns_ += bound;
}
}  // namespace detail

void set_profile_limits(const RooflineLimits& limits) { g_limits = limits; }
const RooflineLimits& profile_limits() { return g_limits; }

ProfileLayerScope::ProfileLayerScope(const char* name, ProfileCategory category) : scope_(name, category) {
  if (!scope_.active_) return;
  outer_layer_ = tl_layer;
  tl_layer = name;
}

ProfileLayerScope::~ProfileLayerScope() {
  if (scope_.active_) tl_layer = outer_layer_;
}

const char* profile_current_layer() { return tl_layer; }

const char* profile_intern(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;  // nodes never move
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

void set_profile_thread_name(const char* name) {
  tl_thread_name = name;
  if (tl_buffer) {
    std::lock_guard<std::mutex> lock(tl_buffer->mutex);
    tl_buffer->name = name;
  }
}

void start_profiling(const ProfileOptions& options) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  for (auto& b : g_buffers) {
    std::lock_guard<std::mutex> buffer_lock(b->mutex);
    b->totals.clear();
    std::vector<ProfileEvent>().swap(b->events);  // a new profile: give the memory back
    b->dropped = 0;
  }
  g_clock = options.clock;
  g_trace_steps = options.trace_steps;
  g_first_traced = g_last_traced = 0;
  g_warmup_steps = options.warmup_steps;
  g_table_first = 1;
  g_last_step = 0;
  g_tracing = false;
  g_origin_ns = now_ns();
  g_table_origin_ns = g_origin_ns;
  tl_thread_name = "main";
  if (tl_buffer) tl_buffer->name = "main";
  detail::g_profiling = true;
}

void stop_profiling() {
  detail::g_profiling = false;
  g_tracing = false;
}

void profile_begin_step(int64_t step) {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  g_last_step = step;
  if (g_warmup_steps > 0 && step == g_warmup_steps + 1) {
    clear_totals_locked();
    g_table_origin_ns = now_ns();
    g_table_first = step;
  }
  if (g_trace_steps <= 0) return;
  if (step == 1) {  // traced in case it is the only one
    g_tracing = true;
    g_first_traced = g_last_traced = 1;
  } else if (step == 2) {  // the first step after warm-up replaces it
    clear_events_locked();
    g_tracing = true;
    g_first_traced = g_last_traced = 2;
  } else {
    g_tracing = g_first_traced > 0 && step <= g_trace_steps + 1;
    if (g_tracing) g_last_traced = step;
  }
}

ProfileReport profile_report() {
  ProfileReport report;
  std::map<std::pair<std::string, ProfileCategory>, Totals> merged;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  report.wall_ns = now_ns() - g_table_origin_ns;
  report.table_first_step = g_table_first;
  report.table_last_step = g_last_step;
  report.warmup_ns = g_table_origin_ns - g_origin_ns.load(std::memory_order_relaxed);
  report.first_traced_step = g_first_traced;
  report.last_traced_step = g_last_traced;
  for (auto& b : g_buffers) {
    std::lock_guard<std::mutex> buffer_lock(b->mutex);
    for (const auto& [key, t] : b->totals) {
      Totals& m = merged[{key.name, key.category}];
      m.calls += t.calls;
      m.total_ns += t.total_ns;
      m.self_ns += t.self_ns;
      m.flops += t.flops;
      m.bytes += t.bytes;
      for (int l = 0; l < kMemoryLevels; ++l) m.level_bytes[l] += t.level_bytes[l];
      m.bound_ns += t.bound_ns;
      m.self_bound_ns += t.self_bound_ns;
    }
    report.dropped_events += b->dropped;
    if (b->totals.empty() && b->events.empty()) continue;
    report.threads.push_back({b->tid, b->name, b->events});
  }
  for (const auto& [key, t] : merged)
    report.stats.push_back({key.first,
                            key.second,
                            t.calls,
                            t.total_ns,
                            t.self_ns,
                            t.flops,
                            t.bytes,
                            {t.level_bytes[0], t.level_bytes[1], t.level_bytes[2]},  // kMemoryLevels
                            t.bound_ns,
                            t.self_bound_ns});
  report.limits = g_limits;
  std::stable_sort(report.stats.begin(), report.stats.end(),
                   [](const ProfileStat& a, const ProfileStat& b) { return a.total_ns > b.total_ns; });
  return report;
}

}  // namespace shamn
