#pragma once
// What a sweep writes once its points are done: results.csv (one row per run),
// summary.md (mean +- std over seeds for each point) and a gnuplot script that
// draws the plots from summary data. Pure functions of the rows, so tests check
// them without running anything.
#include <map>
#include <string>
#include <vector>

#include "sweep/sweep_spec.h"

namespace shamn {

// The metrics one finished point reports, in the order of the CSV columns.
const std::vector<std::string>& sweep_metric_names();
// The last of them: `shamn analyze`'s headline numbers on the val file.
//   expert_entropy_ratio  expert-load entropy / its uniform maximum log(experts),
//                         mean over MoE layers (1 = every expert equally used)
//   memory_slots_read     share of memory slots read at least once, mean over memory layers
//   rare_loss, frequent_loss  mean loss on targets in the rarest / most frequent third of token types
const std::vector<std::string>& sweep_analysis_metric_names();

struct SweepRow {
  std::string name;
  std::vector<std::string> axis_values;  // one per axis
  int64_t seed = 0;
  std::map<std::string, double> metrics;  // every name of sweep_metric_names()
};

// Mean and sample standard deviation (0 for a single value).
struct MeanStd {
  double mean = 0, std = 0;
  int64_t n = 0;
};
MeanStd mean_std(const std::vector<double>& values);

// Header: the axis keys, seed, then the metrics; one row per point.
std::string results_csv(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows);

// Points that differ only in seed, in first-seen order.
struct SweepGroup {
  std::vector<std::string> axis_values;
  std::vector<const SweepRow*> rows;
  // Over the rows that have the metric (NaN: none, as a null in result.json); n
  // counts them, and the summary names a count below the group's.
  MeanStd metric(const std::string& name) const;
};
std::vector<SweepGroup> group_by_seed(const std::vector<SweepRow>& rows);

// `unfinished`: the names of the points without a result (failed, stopped), listed
// under the table so that a group whose seeds all failed is not silently absent.
std::string summary_markdown(const SweepSpec& spec, const std::vector<SweepRow>& rows,
                             const std::vector<std::string>& unfinished = {});

// The axis the plots put on x: model.sparse.sparsity if swept, else the first
// axis whose values are all numbers; -1 if none (x is then the group index).
int plot_axis(const std::vector<SweepAxis>& axes);

// plot_data.tsv (x, label, then mean and std of each metric, one line per group)
// and the gnuplot script that turns it into <out_dir>/plots/*.{png,svg}.
std::string plot_data_tsv(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows);
std::string gnuplot_script(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows,
                           const std::string& data_file, const std::string& plot_dir);

}  // namespace shamn
