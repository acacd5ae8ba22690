// The roofline arithmetic of --profile: a call's level and bound, work attributed
// to the innermost scope and summed into its parents, and the table's ratios and
// shares. Times come from a clock the test drives; nothing is measured.
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "core/profile_roofline.h"
#include "core/profiler.h"
#include "core/roofline.h"

namespace shamn {
namespace {

int64_t g_now = 0;
int64_t fake_clock() { return g_now; }

// 10 GFLOP/s; 100, 50 and 10 GB/s from L2, L3, DRAM; L2 holds 1000 bytes, L3 10000.
RooflineLimits test_limits() {
  RooflineLimits l;
  l.flops_per_s = 10e9;
  l.bytes_per_s[0] = 100e9;
  l.bytes_per_s[1] = 50e9;
  l.bytes_per_s[2] = 10e9;
  l.capacity_bytes[0] = 1000;
  l.capacity_bytes[1] = 10000;
  return l;
}

const ProfileStat& stat(const ProfileReport& r, const std::string& name, ProfileCategory c) {
  for (const ProfileStat& s : r.stats)
    if (s.name == name && s.category == c) return s;
  FAIL("no row " << name);
  return r.stats.front();
}

// The line of `table` that starts with `name` and a space ("" if none).
std::string row_of(const std::string& table, const std::string& name) {
  size_t at = 0;
  while (at < table.size()) {
    const size_t end = table.find('\n', at);
    const std::string line = table.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind(name + " ", 0) == 0) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

// A profile on the fake clock with the test limits; both undone at the end.
struct LimitedProfile {
  LimitedProfile() {
    g_now = 0;
    set_profile_limits(test_limits());
    ProfileOptions o;
    o.clock = fake_clock;
    start_profiling(o);
  }
  ~LimitedProfile() {
    stop_profiling();
    set_profile_limits(RooflineLimits{});
  }
};

}  // namespace

TEST_CASE("roofline: the level holding a call's bytes and its bound", "[core][roofline]") {
  const RooflineLimits l = test_limits();
  CHECK(l.valid());
  CHECK(memory_level(1000, l) == MemoryLevel::l2);
  CHECK(memory_level(1001, l) == MemoryLevel::l3);
  CHECK(memory_level(10000, l) == MemoryLevel::l3);
  CHECK(memory_level(10001, l) == MemoryLevel::dram);
  // 1000 FLOPs take 100 ns; 800 bytes from L2 take 8 ns: compute-bound.
  CHECK(roofline_bound_ns(1000, 800, l) == Approx(100.0));
  // 10 FLOPs take 1 ns; 5000 bytes from L3 take 100 ns.
  CHECK(roofline_bound_ns(10, 5000, l) == Approx(100.0));
  // 20000 bytes from DRAM: 2000 ns.
  CHECK(roofline_bound_ns(0, 20000, l) == Approx(2000.0));
  RooflineLimits missing = l;
  missing.bytes_per_s[2] = 0;
  CHECK_FALSE(missing.valid());
  CHECK(roofline_bound_ns(1000, 800, missing) == 0);
}

TEST_CASE("roofline: work goes to the innermost scope and adds up in its parents", "[core][roofline]") {
  const LimitedProfile profile;
  std::optional<ProfileScope> step(std::in_place, "train_step", ProfileCategory::step);
  {
    std::optional<ProfileScope> layer(std::in_place, "layers.0.moe", ProfileCategory::forward);
    {
      const ProfileScope op("op_a", ProfileCategory::forward);
      profile_work(1000, 800);  // bound 100 ns (compute)
      profile_work(10, 5000);   // bound 100 ns (L3)
      g_now += 400;
    }
    {
      const ProfileScope op("op_b", ProfileCategory::forward);
      profile_work(0, 20000);  // bound 2000 ns (DRAM)
      g_now += 3000;
    }
    g_now += 100;
  }
  profile_work(2000, 0);  // the step's own work: bound 200 ns
  g_now += 500;
  step.reset();
  const ProfileReport r = profile_report();

  const ProfileStat& a = stat(r, "op_a", ProfileCategory::forward);
  CHECK(a.flops == 1010);
  CHECK(a.bytes == 5800);
  CHECK(a.bound_ns == Approx(200.0));
  CHECK(a.self_bound_ns == Approx(200.0));
  CHECK(a.level_bytes[0] == 800);  // by the level rule: 800 bytes fit the L2
  CHECK(a.level_bytes[1] == 5000);
  CHECK(a.level_bytes[2] == 0);
  const ProfileStat& layer = stat(r, "layers.0.moe", ProfileCategory::forward);
  CHECK(layer.flops == 1010);
  CHECK(layer.bytes == 25800);
  CHECK(layer.bound_ns == Approx(2200.0));  // the sum of its calls' bounds
  CHECK(layer.level_bytes[2] == 20000);
  CHECK(layer.self_bound_ns == 0);
  const ProfileStat& s = stat(r, "train_step", ProfileCategory::step);
  CHECK(s.total_ns == 4000);
  CHECK(s.flops == 3010);
  CHECK(s.bound_ns == Approx(2400.0));
  CHECK(s.self_bound_ns == Approx(200.0));

  // Ratio time / bound and share of the step.
  CHECK(profile_step_ns(r) == 4000);
  CHECK(profile_step_bound_ns(r) == Approx(2400.0));
  const RooflineRow ra = roofline_row(a, profile_step_ns(r));
  CHECK(ra.bound_ms == Approx(200e-6));
  CHECK(ra.ratio == Approx(2.0));  // 400 ns against 200
  CHECK(ra.share == Approx(0.1));  // 400 of 4000
  const RooflineRow rb = roofline_row(stat(r, "op_b", ProfileCategory::forward), 4000);
  CHECK(rb.ratio == Approx(1.5));  // 3000 against 2000
  CHECK(rb.share == Approx(0.75));

  // Ops only (rows whose whole bound is their own), largest time above bound
  // first: op_b (1000 ns), op_a (200); not the step, which holds other rows' work.
  const auto excess = largest_excess(r, 5);
  REQUIRE(excess.size() == 2);
  CHECK(excess[0].name == "op_b");
  CHECK(excess[1].name == "op_a");

  const std::string table = format_roofline_table(r);
  CHECK(table.find("x bound") != std::string::npos);
  // The "in" column: op_b's bytes came from DRAM, most of op_a's from L3.
  CHECK(row_of(table, "op_b").find(" DRAM ") != std::string::npos);
  CHECK(row_of(table, "op_a").find(" L3 ") != std::string::npos);
  // The step (4 us) against the sum of the calls' bounds (2.4 us): 1.67x.
  CHECK(table.find("sum of bounds of 0.00 ms: 1.67x the roofline") != std::string::npos);
}

TEST_CASE("roofline: without limits the work is kept and no bound is shown", "[core][roofline]") {
  set_profile_limits(RooflineLimits{});
  g_now = 0;
  ProfileOptions o;
  o.clock = fake_clock;
  start_profiling(o);
  {
    const ProfileScope op("op_c", ProfileCategory::forward);
    profile_work(64, 128);
    g_now += 10;
  }
  stop_profiling();
  const ProfileReport r = profile_report();
  const ProfileStat& c = stat(r, "op_c", ProfileCategory::forward);
  CHECK(c.flops == 64);
  CHECK(c.bytes == 128);
  CHECK(c.bound_ns == 0);
  CHECK(roofline_row(c, 10).ratio == 0);
  const std::string table = format_roofline_table(r);
  CHECK(table.find("no machine limits") != std::string::npos);
  CHECK(table.find("sum of bounds") == std::string::npos);
}

TEST_CASE("roofline: work while profiling is off records nothing", "[core][roofline]") {
  start_profiling();
  stop_profiling();
  {
    const ProfileScope op("off_op", ProfileCategory::forward);
    profile_work(100, 100);
  }
  const ProfileReport r = profile_report();
  CHECK(r.stats.empty());
  CHECK(format_roofline_table(r).empty());
}

}  // namespace shamn
