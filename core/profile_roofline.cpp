#include "core/profile_roofline.h"

#include <algorithm>
#include <cstdio>

namespace shamn {

namespace {

double ms(double ns) { return ns / 1e6; }

std::string printf_string(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

bool has_work(const ProfileStat& s) { return s.flops > 0 || s.bytes > 0; }

// Where most of a row's bytes were charged (the level rule of core/roofline.h).
const char* main_level(const ProfileStat& s, const RooflineLimits& limits) {
  if (!limits.valid() || s.bytes == 0) return "-";
  int best = 0;
  for (int l = 1; l < kMemoryLevels; ++l)
    if (s.level_bytes[l] > s.level_bytes[best]) best = l;
  return memory_level_name(static_cast<MemoryLevel>(best));
}

std::string ratio_text(const RooflineRow& r) { return r.ratio > 0 ? printf_string("%.1f", r.ratio) : "-"; }

}  // namespace

int64_t profile_step_ns(const ProfileReport& report) {
  int64_t step = 0;
  for (const ProfileStat& s : report.stats)
    if (s.category == ProfileCategory::step) step += s.total_ns;
  return step > 0 ? step : report.wall_ns;
}

double profile_step_bound_ns(const ProfileReport& report) {
  double step = 0, all = 0;
  for (const ProfileStat& s : report.stats) {
    if (s.category == ProfileCategory::step) step += s.bound_ns;
    all += s.self_bound_ns;
  }
  return step > 0 ? step : all;
}

RooflineRow roofline_row(const ProfileStat& stat, int64_t step_ns) {
  RooflineRow r;
  r.bound_ms = ms(stat.bound_ns);
  if (stat.bound_ns > 0) r.ratio = static_cast<double>(stat.total_ns) / stat.bound_ns;
  if (step_ns > 0) r.share = static_cast<double>(stat.total_ns) / static_cast<double>(step_ns);
  return r;
}

std::vector<ProfileStat> largest_excess(const ProfileReport& report, size_t count) {
  std::vector<ProfileStat> ops;
  // An op: a row with work of its own and none from child scopes.
  for (const ProfileStat& s : report.stats)
    if (s.self_bound_ns > 0 && s.bound_ns <= s.self_bound_ns) ops.push_back(s);
  auto excess = [](const ProfileStat& s) { return static_cast<double>(s.total_ns) - s.bound_ns; };
  std::stable_sort(ops.begin(), ops.end(),
                   [&](const ProfileStat& a, const ProfileStat& b) { return excess(a) > excess(b); });
  if (ops.size() > count) ops.resize(count);
  return ops;
}

std::string format_roofline_table(const ProfileReport& report, size_t max_rows) {
  std::vector<const ProfileStat*> rows;
  for (const ProfileStat& s : report.stats)
    if (has_work(s) && rows.size() < max_rows) rows.push_back(&s);
  if (rows.empty()) return "";
  const RooflineLimits& l = report.limits;
  const int64_t step_ns = profile_step_ns(report);
  std::string out;
  if (l.valid())
    out += printf_string(
        "roofline: peak %.1f GFLOP/s f32; %.1f / %.1f / %.1f GB/s from L2 / L3 / DRAM; a call's "
        "operands live in L2 up to %.1f MiB, in L3 up to %.1f MiB\n",
        l.flops_per_s / 1e9, l.bytes_per_s[0] / 1e9, l.bytes_per_s[1] / 1e9, l.bytes_per_s[2] / 1e9,
        l.capacity_bytes[0] / 1048576.0, l.capacity_bytes[1] / 1048576.0);
  else
    out += "roofline: no machine limits, so no bounds (work only)\n";
  int name_width = 4;
  for (const ProfileStat* s : rows) name_width = std::max(name_width, static_cast<int>(s->name.size()));
  out += printf_string("%-*s  %-9s %11s %10s %10s %5s %11s %8s %7s\n", name_width, "name", "category",
                       "total ms", "GFLOP", "MB", "in", "bound ms", "x bound", "% step");
  for (const ProfileStat* s : rows) {
    const RooflineRow r = roofline_row(*s, step_ns);
    out +=
        printf_string("%-*s  %-9s %11.2f %10.3f %10.1f %5s %11.3f %8s %7.1f\n", name_width, s->name.c_str(),
                      profile_category_name(s->category), ms(static_cast<double>(s->total_ns)),
                      static_cast<double>(s->flops) / 1e9, static_cast<double>(s->bytes) / 1e6,
                      main_level(*s, l), r.bound_ms, ratio_text(r).c_str(), 100.0 * r.share);
  }
  const double bound_sum = profile_step_bound_ns(report);
  if (bound_sum > 0) {
    out += printf_string("step: %.2f ms against a sum of bounds of %.2f ms: %.2fx the roofline\n",
                         ms(static_cast<double>(step_ns)), ms(bound_sum),
                         static_cast<double>(step_ns) / bound_sum);
    out += "largest time above bound (op, category, ms above, x bound, % step):\n";
    for (const ProfileStat& s : largest_excess(report, 10)) {
      const RooflineRow r = roofline_row(s, step_ns);
      out += printf_string(
          "  %-*s  %-9s %10.2f %8s %7.1f\n", name_width, s.name.c_str(), profile_category_name(s.category),
          ms(static_cast<double>(s.total_ns) - s.bound_ns), ratio_text(r).c_str(), 100.0 * r.share);
    }
  }
  return out;
}

}  // namespace shamn
