#pragma once
// Training curves from run directories' metrics.jsonl, drawn by gnuplot:
// `shamn plot RUN_DIR...` and the picture the trainer refreshes at each
// evaluation (RUN_DIR/plots/loss.svg). One panel per quantity (train and val
// loss share one), every run in its own colour: the train loss smoothed, its
// raw line faint behind it, val losses as marked points.
#include <cstdint>
#include <string>
#include <vector>

namespace shamn {

// What metrics.jsonl holds for one run, in file order.
struct RunCurves {
  std::string dir, label;
  int64_t tokens_per_step = 0;                                       // from config.toml; 0 when it has none
  std::vector<int64_t> steps;                                        // train records
  std::vector<double> elapsed_s, loss, lr, grad_norm, tokens_per_s;  // NaN where null
  std::vector<int64_t> val_steps;
  std::vector<double> val_loss;
};

// An InputError names the file and line of a record that does not parse.
RunCurves read_run_curves(const std::string& run_dir);

// The run directories named by `paths`: a run (metrics.jsonl), a sweep point
// (point/run/metrics.jsonl), or a directory of either (a sweep: every point,
// sorted by name). Labels are the run's directory name (a point's for a sweep
// point), or its path where two would be the same.
std::vector<RunCurves> read_runs(const std::vector<std::string>& paths);

struct PlotSpec {
  std::string x = "step";                                   // step | tokens | time
  std::vector<std::string> metrics = {"loss", "val_loss"};  // loss val_loss lr grad_norm tokens_per_s
  void validate() const;                                    // errors name --x / --metrics
};

// Bias-corrected exponential moving average over the finite values (NaN stays
// NaN), its window a fortieth of the run: a long run is smoothed as much as a
// short one, relative to its length.
std::vector<double> smoothed(const std::vector<double>& v);

// The gnuplot script (data inline) that draws `runs` into `output`; its
// terminal follows the extension (.png: pngcairo, .svg: svg).
std::string curves_script(const std::vector<RunCurves>& runs, const PlotSpec& spec,
                          const std::string& output);

// Draws the plot into `output` (.png or .svg, replaced atomically).
// InputError when gnuplot is missing or fails.
void plot_runs(const std::vector<RunCurves>& runs, const PlotSpec& spec, const std::string& output);

// RUN_DIR/plots/loss.svg from its metrics.jsonl (the trainer, at each
// evaluation). Never throws: returns "" or why there is no picture.
std::string refresh_loss_plot(const std::string& run_dir);

}  // namespace shamn
