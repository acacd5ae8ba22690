#pragma once
// One point of a sweep, run in its directory by child processes of this binary:
// train (or resume), export to int8, eval f32 vs int8 on the val file, bench
// decode, analyze the final checkpoint on the val file (analysis.json, plots in
// analysis_plots/). result.json, written atomically last, marks the point
// finished.
#include <string>

#include "sweep/sweep_report.h"
#include "sweep/sweep_spec.h"

namespace shamn {

struct PointSettings {
  std::string exe;  // this binary
  int64_t threads = 1;
  int64_t eval_windows = 64;
};

enum class PointState { finished, unanalysed, interrupted, fresh };

// finished: result.json with every metric; unanalysed: a result.json without
// the analysis numbers (a point finished before sweeps ran `shamn analyze`);
// interrupted: a run directory with a checkpoint.
PointState point_state(const SweepPoint& p);
std::string result_path(const SweepPoint& p);

// Runs whatever is left of the point (of an unanalysed one: the analysis,
// added to its result.json; no retraining). Returns false when a stop was requested
// (the trainer has checkpointed; a rerun resumes); throws on a failed step.
bool run_point(const SweepPoint& p, const PointSettings& s);

// The finished point's row (from its result.json).
SweepRow read_point_result(const SweepPoint& p);

}  // namespace shamn
