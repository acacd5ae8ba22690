#pragma once
// The roofline part of the `--profile` table: each row's work (FLOPs, minimum
// bytes, and "in": the level that holds most of those bytes by the rule of
// core/roofline.h), its bound from the machine's limits, how far its time is
// above the bound, and the whole step against the sum of its ops' bounds.
#include <string>
#include <vector>

#include "core/profiler.h"

namespace shamn {

struct RooflineRow {
  double bound_ms = 0;
  double ratio = 0;  // time / bound; 0 when there is no bound
  double share = 0;  // of the step's time, in [0, 1] for rows inside the step
};

// The time the table calls "the step": the rows of category step (train_step,
// or prefill/decode_token), else the profile's wall time.
int64_t profile_step_ns(const ProfileReport& report);

// The sum of the bounds of every call inside the step rows (else of every call).
double profile_step_bound_ns(const ProfileReport& report);

RooflineRow roofline_row(const ProfileStat& stat, int64_t step_ns);

// The ops (rows whose work is all their own: none from child scopes), largest
// time above their bound first (where a faster kernel would gain the most); at
// most `count`.
std::vector<ProfileStat> largest_excess(const ProfileReport& report, size_t count);

// Empty when no scope recorded work; else the roofline table, the step's line and
// the largest excesses.
std::string format_roofline_table(const ProfileReport& report, size_t max_rows = 60);

}  // namespace shamn
