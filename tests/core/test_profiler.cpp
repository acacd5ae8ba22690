// The --profile profiler: scopes off cost nothing and record nothing; on, total
// and self times add up (checked with a clock the test drives), threads keep
// their own buffers, and only the traced steps become trace events.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/profile_report.h"
#include "core/profiler.h"

namespace shamn {
namespace {

int64_t g_now = 0;
int64_t fake_clock() { return g_now; }

const ProfileStat* find_stat(const ProfileReport& r, const std::string& name, ProfileCategory c) {
  for (const ProfileStat& s : r.stats)
    if (s.name == name && s.category == c) return &s;
  return nullptr;
}

size_t event_count(const ProfileReport& r) {
  size_t n = 0;
  for (const ProfileThread& t : r.threads) n += t.events.size();
  return n;
}

// Starts a profile on the fake clock at time 0; stops it when the test ends.
struct FakeClockProfile {
  explicit FakeClockProfile(int64_t trace_steps = 3, int64_t warmup_steps = 0) {
    g_now = 0;
    ProfileOptions options;
    options.trace_steps = trace_steps;
    options.warmup_steps = warmup_steps;
    options.clock = fake_clock;
    start_profiling(options);
  }
  ~FakeClockProfile() { stop_profiling(); }
};

}  // namespace

TEST_CASE("profiler: scopes record nothing while profiling is off", "[core][profiler]") {
  start_profiling();
  stop_profiling();
  CHECK_FALSE(profiling());
  profile_begin_step(1);
  {
    const ProfileScope a("off_outer", ProfileCategory::forward);
    const ProfileLayerScope b("off_layer", ProfileCategory::forward);
    CHECK(profile_current_layer() == nullptr);
  }
  const ProfileReport r = profile_report();
  CHECK(r.stats.empty());
  CHECK(event_count(r) == 0);
  CHECK(r.first_traced_step == 0);
}

TEST_CASE("profiler: nested scopes split total and self time", "[core][profiler]") {
  FakeClockProfile profile;
  profile_begin_step(1);
  g_now = 10;
  std::optional<ProfileScope> outer(std::in_place, "outer", ProfileCategory::step);
  g_now = 15;
  std::optional<ProfileScope> a(std::in_place, "op_a", ProfileCategory::forward);
  g_now = 35;
  a.reset();  // op_a: 20
  g_now = 40;
  std::optional<ProfileScope> b(std::in_place, "op_b", ProfileCategory::backward);
  g_now = 41;
  std::optional<ProfileScope> inner_a(std::in_place, "op_a", ProfileCategory::forward);
  g_now = 44;
  inner_a.reset();  // op_a inside op_b: 3
  g_now = 50;
  b.reset();  // op_b: 10, of which 3 in op_a
  g_now = 60;
  outer.reset();  // outer: 50, of which 20 + 10 in children
  g_now = 100;

  const ProfileReport r = profile_report();
  CHECK(r.wall_ns == 100);
  const ProfileStat* o = find_stat(r, "outer", ProfileCategory::step);
  const ProfileStat* sa = find_stat(r, "op_a", ProfileCategory::forward);
  const ProfileStat* sb = find_stat(r, "op_b", ProfileCategory::backward);
  REQUIRE(o);
  REQUIRE(sa);
  REQUIRE(sb);
  CHECK(o->calls == 1);
  CHECK(o->total_ns == 50);
  CHECK(o->self_ns == 20);
  CHECK(sa->calls == 2);
  CHECK(sa->total_ns == 23);
  CHECK(sa->self_ns == 23);
  CHECK(sb->total_ns == 10);
  CHECK(sb->self_ns == 7);
  // Longest total first.
  REQUIRE(r.stats.size() == 3);
  CHECK(r.stats[0].name == "outer");
  CHECK(r.stats[1].name == "op_a");
  CHECK(r.stats[2].name == "op_b");

  // Step 1 of a one-step run is traced: four events in closing order, relative to the start.
  REQUIRE(r.threads.size() == 1);
  const std::vector<ProfileEvent>& ev = r.threads[0].events;
  REQUIRE(ev.size() == 4);
  CHECK(std::string(ev[0].name) == "op_a");
  CHECK(ev[0].begin_ns == 15);
  CHECK(ev[0].duration_ns == 20);
  CHECK(std::string(ev[3].name) == "outer");
  CHECK(ev[3].begin_ns == 10);
  CHECK(ev[3].duration_ns == 50);
  CHECK(r.threads[0].name == "main");
}

TEST_CASE("profiler: the table lists every name with its figures", "[core][profiler]") {
  FakeClockProfile profile;
  for (int i = 0; i < 3; ++i) {
    const ProfileScope s("block_sparse_linear", ProfileCategory::forward);
    g_now += 2'000'000;  // 2 ms
  }
  {
    const ProfileScope s("adamw_step", ProfileCategory::optimizer);
    g_now += 1'000'000;
  }
  g_now = 10'000'000;
  const std::string table = format_profile_table(profile_report());
  INFO(table);
  CHECK(table.find("10.0 ms wall") != std::string::npos);
  CHECK(table.find("block_sparse_linear  forward") != std::string::npos);
  CHECK(table.find("6.00") != std::string::npos);  // 3 x 2 ms
  CHECK(table.find("60.0") != std::string::npos);  // % of wall
  CHECK(table.find("optimizer") != std::string::npos);
  CHECK(table.find("block_sparse_linear") < table.find("adamw_step"));
  const std::string one_row = format_profile_table(profile_report(), 1);
  CHECK(one_row.find("adamw_step  ") == std::string::npos);
  CHECK(one_row.find("1 more rows") != std::string::npos);
  const std::string no_rows = format_profile_table(profile_report(), 0);
  CHECK(no_rows.find("block_sparse_linear  ") == std::string::npos);
  CHECK(no_rows.find("(2 rows, none shown)") != std::string::npos);
}

TEST_CASE("profiler: only the steps after the warm-up step are traced", "[core][profiler]") {
  FakeClockProfile profile(2);
  for (int64_t step = 1; step <= 6; ++step) {
    profile_begin_step(step);
    const ProfileScope s(step == 1 ? "warm_up" : "step", ProfileCategory::step);
    g_now += 10;
  }
  const ProfileReport r = profile_report();
  CHECK(r.first_traced_step == 2);
  CHECK(r.last_traced_step == 3);
  REQUIRE(r.threads.size() == 1);
  REQUIRE(r.threads[0].events.size() == 2);  // steps 2 and 3
  CHECK(std::string(r.threads[0].events[0].name) == "step");
  CHECK(r.threads[0].events[0].begin_ns == 10);
  CHECK(r.threads[0].events[1].begin_ns == 20);
  // The table still covers every step.
  const ProfileStat* s = find_stat(r, "step", ProfileCategory::step);
  REQUIRE(s);
  CHECK(s->calls == 5);
  REQUIRE(find_stat(r, "warm_up", ProfileCategory::step));
}

TEST_CASE("profiler: the table leaves out the warm-up steps", "[core][profiler]") {
  FakeClockProfile profile(3, 2);
  for (int64_t step = 1; step <= 5; ++step) {
    profile_begin_step(step);
    const ProfileScope s(step <= 2 ? "warm_up" : "step", ProfileCategory::step);
    g_now += 10 * step;  // steps 1-5 take 10, 20, ..., 50
  }
  const ProfileReport r = profile_report();
  CHECK(find_stat(r, "warm_up", ProfileCategory::step) == nullptr);
  const ProfileStat* s = find_stat(r, "step", ProfileCategory::step);
  REQUIRE(s);
  CHECK(s->calls == 3);
  CHECK(s->total_ns == 30 + 40 + 50);
  CHECK(r.wall_ns == 30 + 40 + 50);
  CHECK(r.warmup_ns == 10 + 20);
  CHECK(r.table_first_step == 3);
  CHECK(r.table_last_step == 5);
  CHECK(format_profile_table(r).find("steps 3-5; the first 2, 0.0 ms, left out as warm-up") !=
        std::string::npos);
  // The trace still starts after the first step: its events are not the table's.
  CHECK(r.first_traced_step == 2);
  CHECK(r.last_traced_step == 4);
}

TEST_CASE("profiler: a run no longer than its warm-up keeps every step in the table", "[core][profiler]") {
  FakeClockProfile profile(3, 2);
  for (int64_t step = 1; step <= 2; ++step) {
    profile_begin_step(step);
    const ProfileScope s("step", ProfileCategory::step);
    g_now += 10;
  }
  const ProfileReport r = profile_report();
  CHECK(find_stat(r, "step", ProfileCategory::step)->calls == 2);
  CHECK(r.wall_ns == 20);
  CHECK(r.table_first_step == 1);
  CHECK(r.warmup_ns == 0);
  CHECK(format_profile_table(r).find("(steps 1-2)") != std::string::npos);
}

TEST_CASE("profiler: --profile-steps 0 traces nothing", "[core][profiler]") {
  FakeClockProfile profile(0);
  for (int64_t step = 1; step <= 3; ++step) {
    profile_begin_step(step);
    const ProfileScope s("step", ProfileCategory::step);
  }
  const ProfileReport r = profile_report();
  CHECK(event_count(r) == 0);
  CHECK(r.first_traced_step == 0);
  CHECK(find_stat(r, "step", ProfileCategory::step)->calls == 3);
}

TEST_CASE("profiler: every thread records into its own buffer", "[core][profiler]") {
  start_profiling();
  profile_begin_step(1);
  constexpr int kThreads = 4, kScopes = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      static const char* const names[kThreads] = {"worker a", "worker b", "worker c", "worker d"};
      set_profile_thread_name(names[t]);
      for (int i = 0; i < kScopes; ++i) {
        const ProfileScope outer("work", ProfileCategory::data);
        const ProfileScope inner("work_inner", ProfileCategory::data);
      }
    });
  for (std::thread& th : threads) th.join();
  stop_profiling();
  const ProfileReport r = profile_report();
  CHECK(find_stat(r, "work", ProfileCategory::data)->calls == kThreads * kScopes);
  CHECK(find_stat(r, "work_inner", ProfileCategory::data)->calls == kThreads * kScopes);
  int workers = 0;
  for (const ProfileThread& t : r.threads) {
    if (t.name.rfind("worker ", 0) != 0) continue;
    ++workers;
    REQUIRE(t.events.size() == 2 * kScopes);
    // Per thread: each inner event lies inside the outer one that follows it.
    for (size_t i = 0; i < t.events.size(); i += 2) {
      const ProfileEvent& in = t.events[i];
      const ProfileEvent& out = t.events[i + 1];
      CHECK(std::string(in.name) == "work_inner");
      CHECK(in.begin_ns >= out.begin_ns);
      CHECK(in.begin_ns + in.duration_ns <= out.begin_ns + out.duration_ns);
    }
  }
  CHECK(workers == kThreads);
}

TEST_CASE("profiler: layer scopes nest and restore the current layer", "[core][profiler]") {
  FakeClockProfile profile;
  CHECK(profile_current_layer() == nullptr);
  {
    const ProfileLayerScope outer("layers.0.moe", ProfileCategory::forward);
    CHECK(std::string(profile_current_layer()) == "layers.0.moe");
    {
      const ProfileLayerScope inner(profile_intern("layers.0.moe.experts"), ProfileCategory::forward);
      CHECK(std::string(profile_current_layer()) == "layers.0.moe.experts");
    }
    CHECK(std::string(profile_current_layer()) == "layers.0.moe");
  }
  CHECK(profile_current_layer() == nullptr);
  CHECK(profile_intern("x.y") == profile_intern(std::string("x.") + "y"));
}

TEST_CASE("profiler: profiled() times a call and passes its result through", "[core][profiler]") {
  FakeClockProfile profile;
  const int v = profiled("compute", ProfileCategory::optimizer, [] {
    g_now += 7;
    return 42;
  });
  CHECK(v == 42);
  profiled("nothing", ProfileCategory::optimizer, [] { g_now += 1; });
  const ProfileReport r = profile_report();
  REQUIRE(find_stat(r, "compute", ProfileCategory::optimizer));
  CHECK(find_stat(r, "compute", ProfileCategory::optimizer)->total_ns == 7);
  CHECK(find_stat(r, "nothing", ProfileCategory::optimizer)->total_ns == 1);
}

TEST_CASE("profiler: the Chrome trace holds complete events and thread names", "[core][profiler]") {
  FakeClockProfile profile;
  profile_begin_step(1);
  g_now = 1500;
  {
    const ProfileScope s("say \"hi\"\\", ProfileCategory::io);
    g_now = 4250;
  }
  const std::string json = chrome_trace_json(profile_report());
  INFO(json);
  const nlohmann::json trace = nlohmann::json::parse(json);  // valid JSON, names escaped
  const nlohmann::json& events = trace.at("traceEvents");
  REQUIRE(events.size() == 2);
  CHECK(events[0].at("name") == "thread_name");
  CHECK(events[0].at("ph") == "M");
  CHECK(events[0].at("args").at("name") == "main");
  const nlohmann::json& e = events[1];
  CHECK(e.at("name") == "say \"hi\"\\");
  CHECK(e.at("cat") == "io");
  CHECK(e.at("ph") == "X");
  CHECK(e.at("ts").get<double>() == 1.5);  // microseconds, nanoseconds kept
  CHECK(e.at("dur").get<double>() == 2.75);
  CHECK(e.at("tid") == events[0].at("tid"));
  CHECK(trace.at("otherData").at("first_traced_step") == 1);
  CHECK(trace.at("otherData").at("last_traced_step") == 1);
}

}  // namespace shamn
