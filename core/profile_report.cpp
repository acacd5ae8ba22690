#include "core/profile_report.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/profile_roofline.h"

namespace shamn {

namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string printf_string(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

}  // namespace

std::string format_profile_table(const ProfileReport& report, size_t max_rows) {
  const double wall = std::max<double>(static_cast<double>(report.wall_ns), 1.0);
  auto pct = [wall](int64_t ns) { return 100.0 * static_cast<double>(ns) / wall; };
  std::string steps;
  if (report.table_first_step > 1)
    steps = printf_string(" (steps %lld-%lld; the first %lld, %.1f ms, left out as warm-up)",
                          static_cast<long long>(report.table_first_step),
                          static_cast<long long>(report.table_last_step),
                          static_cast<long long>(report.table_first_step - 1), ms(report.warmup_ns));
  else if (report.table_last_step > 0)
    steps = printf_string(" (steps 1-%lld)", static_cast<long long>(report.table_last_step));
  std::string out = printf_string(
      "profile: %.1f ms wall%s; times are summed over threads (n busy threads "
      "reach n x 100%% of wall); self time per category:\n",
      ms(report.wall_ns), steps.c_str());
  int64_t by_category[kProfileCategories] = {};
  for (const ProfileStat& s : report.stats) by_category[static_cast<int>(s.category)] += s.self_ns;
  for (int c = 0; c < kProfileCategories; ++c)
    if (by_category[c] > 0)
      out +=
          printf_string("  %-10s %10.1f ms %6.1f%%\n", profile_category_name(static_cast<ProfileCategory>(c)),
                        ms(by_category[c]), pct(by_category[c]));

  int name_width = 4;
  const size_t rows = std::min(max_rows, report.stats.size());
  for (size_t i = 0; i < rows; ++i)
    name_width = std::max(name_width, static_cast<int>(report.stats[i].name.size()));
  out += printf_string("%-*s  %-9s %9s %11s %11s %7s\n", name_width, "name", "category", "calls", "total ms",
                       "self ms", "% wall");
  for (size_t i = 0; i < rows; ++i) {
    const ProfileStat& s = report.stats[i];
    out += printf_string("%-*s  %-9s %9lld %11.2f %11.2f %7.1f\n", name_width, s.name.c_str(),
                         profile_category_name(s.category), static_cast<long long>(s.calls), ms(s.total_ns),
                         ms(s.self_ns), pct(s.total_ns));
  }
  if (rows == 0 && !report.stats.empty())
    out += printf_string("(%zu rows, none shown)\n", report.stats.size());
  else if (rows < report.stats.size())
    out += printf_string("(%zu more rows, each under %.2f ms total)\n", report.stats.size() - rows,
                         ms(report.stats[rows - 1].total_ns));
  out += format_roofline_table(report, max_rows);
  return out;
}

std::string chrome_trace_json(const ProfileReport& report) {
  // Timestamps in microseconds with the nanoseconds kept, so nested events stay nested.
  auto micros = [](int64_t ns) { return static_cast<double>(std::max<int64_t>(ns, 0)) / 1000.0; };
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const ProfileThread& t : report.threads) {
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t.tid}, {"args", {{"name", t.name}}}});
    for (const ProfileEvent& e : t.events)
      events.push_back({{"name", e.name},
                        {"cat", profile_category_name(e.category)},
                        {"ph", "X"},
                        {"ts", micros(e.begin_ns)},
                        {"dur", micros(e.duration_ns)},
                        {"pid", 1},
                        {"tid", t.tid}});
  }
  const nlohmann::ordered_json trace = {{"traceEvents", std::move(events)},
                                        {"displayTimeUnit", "ms"},
                                        {"otherData",
                                         {{"first_traced_step", report.first_traced_step},
                                          {"last_traced_step", report.last_traced_step},
                                          {"dropped_events", report.dropped_events}}}};
  std::string out = trace.dump();
  out += "\n";
  return out;
}

size_t write_chrome_trace(const ProfileReport& report, const std::string& path) {
  const std::string json = chrome_trace_json(report);
  write_file_atomically(path, json);
  size_t events = 0;
  for (const ProfileThread& t : report.threads) events += t.events.size();
  return events;
}

}  // namespace shamn
