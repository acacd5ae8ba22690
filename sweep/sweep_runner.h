#pragma once
// Runs a sweep file: every point (sweep/sweep_point.h) in its own directory,
// `jobs` at a time, then results.csv, summary.md and, with gnuplot, the plots.
// A rerun skips finished points and resumes interrupted ones; one sweep per
// directory at a time.
#include <cstdint>
#include <string>
#include <vector>

namespace shamn {

struct SweepOptions {
  std::string out_dir;                 // "" = sweep.out_dir
  std::vector<std::string> overrides;  // --set, applied to the base config of every point
  int64_t jobs = 0;                    // 0 = sweep.jobs
  int64_t threads_per_job = 0;         // 0 = sweep.threads_per_job, else cores / jobs
  bool dry_run = false;                // list the points and what a run would do
};

// Throws InputError when a point failed or a signal stopped the sweep.
void run_sweep(const std::string& file, const SweepOptions& options);

}  // namespace shamn
