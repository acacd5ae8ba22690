// `shamn plot RUN_DIR...`: the training curves of one or several runs, or of
// every point of a sweep, overlaid in one picture (train/run_plot.h).
#include <cstdio>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "train/run_plot.h"

namespace shamn::cli {

namespace {

struct PlotArgs {
  std::vector<std::string> dirs;
  std::string out = "curves.png", x = "step", metrics = "loss,val_loss";
};

void run_plot(const PlotArgs& a) {
  PlotSpec spec;
  spec.x = a.x;
  spec.metrics.clear();
  std::stringstream list(a.metrics);
  for (std::string m; std::getline(list, m, ',');)
    if (!m.empty()) spec.metrics.push_back(m);
  spec.validate();  // before reading any run
  const std::vector<RunCurves> runs = read_runs(a.dirs);
  plot_runs(runs, spec, a.out);
  std::printf("wrote %s (%zu run%s)\n", a.out.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
}

}  // namespace

void register_plot_command(CLI::App& app) {
  auto a = std::make_shared<PlotArgs>();
  CLI::App* c = app.add_subcommand(
      "plot",
      "training curves of runs overlaid (gnuplot): train loss smoothed over its faint raw line, val "
      "points marked");
  c->add_option("runs", a->dirs,
                "run directories (with metrics.jsonl), sweep points, or sweep directories (every point)")
      ->required();
  c->add_option("-o,--out", a->out, "picture to write: .png or .svg")->capture_default_str();
  c->add_option("--x", a->x, "x axis: step, tokens (steps x batch x seq x accumulation) or time (s)")
      ->capture_default_str();
  c->add_option("--metrics", a->metrics,
                "comma-separated: loss, val_loss (one panel), lr, grad_norm, tokens_per_s (a panel each)")
      ->capture_default_str();
  c->callback([a] { run_plot(*a); });
}

}  // namespace shamn::cli
