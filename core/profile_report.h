#pragma once
// What `--profile` prints and writes: the table of time per name (op, layer,
// phase) and the Chrome trace of the traced steps (opens in Perfetto or
// chrome://tracing).
#include <string>

#include "core/profiler.h"

namespace shamn {

// Aligned text: a line per category (self time, all threads), then one row per
// name and category, longest total first; rows past `max_rows` are summarised.
std::string format_profile_table(const ProfileReport& report, size_t max_rows = 60);

// {"traceEvents":[...]}: one complete ("X") event per traced scope, times in
// microseconds, plus a thread_name metadata event per thread.
std::string chrome_trace_json(const ProfileReport& report);

// chrome_trace_json written atomically to `path`; returns the number of events.
size_t write_chrome_trace(const ProfileReport& report, const std::string& path);

}  // namespace shamn
