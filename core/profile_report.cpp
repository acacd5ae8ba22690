#include "core/profile_report.h"

#include <algorithm>
#include <cstdio>

#include "core/atomic_file.h"

namespace shamn {

namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string printf_string(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += printf_string("\\u%04x", c);
    } else {
      out += ch;
    }
  }
  out += '"';
}

// Microseconds with the nanoseconds kept, so nested events stay nested.
std::string micros(int64_t ns) {
  ns = std::max<int64_t>(ns, 0);
  return printf_string("%lld.%03lld", static_cast<long long>(ns / 1000),
                       static_cast<long long>(ns % 1000));
}

}  // namespace

std::string format_profile_table(const ProfileReport& report, size_t max_rows) {
  const double wall = std::max<double>(static_cast<double>(report.wall_ns), 1.0);
  auto pct = [wall](int64_t ns) { return 100.0 * static_cast<double>(ns) / wall; };
  std::string out = printf_string("profile: %.1f ms wall; self time per category (all threads):\n", ms(report.wall_ns));
  int64_t by_category[kProfileCategories] = {};
  for (const ProfileStat& s : report.stats) by_category[static_cast<int>(s.category)] += s.self_ns;
  for (int c = 0; c < kProfileCategories; ++c)
    if (by_category[c] > 0)
      out += printf_string("  %-10s %10.1f ms %6.1f%%\n", profile_category_name(static_cast<ProfileCategory>(c)),
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
  if (rows < report.stats.size())
    out += printf_string("(%zu more rows, each under %.2f ms total)\n", report.stats.size() - rows,
                         ms(report.stats[rows - 1].total_ns));
  return out;
}

std::string chrome_trace_json(const ProfileReport& report) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto next = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const ProfileThread& t : report.threads) {
    next();
    out += printf_string("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":", t.tid);
    append_json_string(out, t.name);
    out += "}}";
    for (const ProfileEvent& e : t.events) {
      next();
      out += "{\"name\":";
      append_json_string(out, e.name);
      out += printf_string(",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%s,\"dur\":%s,\"pid\":1,\"tid\":%d}",
                           profile_category_name(e.category), micros(e.begin_ns).c_str(),
                           micros(e.duration_ns).c_str(), t.tid);
    }
  }
  out += "],\"displayTimeUnit\":\"ms\"";
  out += printf_string(",\"otherData\":{\"first_traced_step\":%lld,\"last_traced_step\":%lld,\"dropped_events\":%lld}}\n",
                       static_cast<long long>(report.first_traced_step),
                       static_cast<long long>(report.last_traced_step),
                       static_cast<long long>(report.dropped_events));
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
