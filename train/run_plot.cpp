#include "train/run_plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_table.h"
#include "train/gnuplot.h"

namespace shamn {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::vector<std::string> kMetrics = {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s"};
// Colour-blind-safe (Okabe-Ito), then a few more; runs past these reuse them.
const char* const kColours[] = {"0072B2", "D55E00", "009E73", "CC79A7", "E69F00",
                                "56B4E9", "000000", "F0E442", "7F3C8D", "11A579"};

double number_or_nan(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return kNaN;
  SHAMN_INPUT_CHECK(j[key].is_number(), where, ": \"", key, "\" is not a number");
  return j[key].get<double>();
}

int64_t tokens_per_step(const std::string& run_dir) {
  const fs::path config = fs::path(run_dir) / "config.toml";
  if (!fs::is_regular_file(config)) return 0;
  const ConfigTable t = ConfigTable::parse_file(config.string());
  return t.get_int("train.batch_size").value_or(0) * t.get_int("train.seq_len").value_or(0) *
         t.get_int("train.grad_accum").value_or(1);
}

bool is_run(const fs::path& dir) { return fs::is_regular_file(dir / "metrics.jsonl"); }

std::string num(double v) {
  if (!std::isfinite(v)) return "NaN";
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

double x_of(const RunCurves& r, const std::string& x, int64_t step, double elapsed) {
  if (x == "tokens") return static_cast<double>(step) * static_cast<double>(r.tokens_per_step);
  if (x == "time") return elapsed;
  return static_cast<double>(step);
}

const std::vector<double>& train_series(const RunCurves& r, const std::string& m) {
  if (m == "lr") return r.lr;
  if (m == "grad_norm") return r.grad_norm;
  if (m == "tokens_per_s") return r.tokens_per_s;
  return r.loss;
}

}  // namespace

RunCurves read_run_curves(const std::string& run_dir) {
  RunCurves r;
  r.dir = run_dir;
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  std::ifstream in(path);
  SHAMN_INPUT_CHECK(in.good(), "cannot read '", path, "'");
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A run killed mid-write leaves its last line cut short (resuming drops it).
    if (j.is_discarded() && in.eof()) break;
    SHAMN_INPUT_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer(), where,
                      ": not a metrics record (a JSON object with an integer \"step\")");
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("val_loss")) {
      r.val_steps.push_back(step);
      r.val_loss.push_back(number_or_nan(j, "val_loss", where));
    } else {
      r.steps.push_back(step);
      r.elapsed_s.push_back(number_or_nan(j, "elapsed_s", where));
      r.loss.push_back(number_or_nan(j, "loss", where));
      r.lr.push_back(number_or_nan(j, "lr", where));
      r.grad_norm.push_back(number_or_nan(j, "grad_norm", where));
      r.tokens_per_s.push_back(number_or_nan(j, "tokens_per_s", where));
    }
  }
  r.tokens_per_step = tokens_per_step(run_dir);
  return r;
}

std::vector<RunCurves> read_runs(const std::vector<std::string>& paths) {
  std::vector<std::pair<fs::path, std::string>> dirs;  // run dir, label
  for (const std::string& p : paths) {
    const fs::path dir(p);
    SHAMN_INPUT_CHECK(fs::is_directory(dir), "'", p, "' is not a directory (give run or sweep directories)");
    const fs::path name = dir.lexically_normal().filename().empty()
                              ? dir.lexically_normal().parent_path().filename()
                              : dir.lexically_normal().filename();
    if (is_run(dir)) {
      // A sweep point's run is labelled by its point.
      const bool point_run = name == "run" && fs::is_regular_file(dir / ".." / "result.json");
      dirs.emplace_back(dir, point_run ? fs::absolute(dir).parent_path().filename().string() : name.string());
    } else if (is_run(dir / "run")) {
      dirs.emplace_back(dir / "run", name.string());
    } else {
      std::vector<std::pair<fs::path, std::string>> found;
      for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        if (!e.is_directory()) continue;
        if (is_run(e.path() / "run"))
          found.emplace_back(e.path() / "run", e.path().filename().string());
        else if (is_run(e.path()))
          found.emplace_back(e.path(), e.path().filename().string());
      }
      SHAMN_INPUT_CHECK(!found.empty(), "'", p,
                        "' holds no run: no metrics.jsonl in it, in its run/, or in its subdirectories");
      std::sort(found.begin(), found.end());
      dirs.insert(dirs.end(), found.begin(), found.end());
    }
  }
  std::map<std::string, int> uses;
  for (const auto& d : dirs) ++uses[d.second];
  std::vector<RunCurves> runs;
  for (const auto& [dir, label] : dirs) {
    runs.push_back(read_run_curves(dir.string()));
    runs.back().label = uses[label] > 1 ? dir.string() : label;
  }
  return runs;
}

void PlotSpec::validate() const {
  SHAMN_INPUT_CHECK(x == "step" || x == "tokens" || x == "time", "--x ", x, ": use step, tokens or time");
  SHAMN_INPUT_CHECK(!metrics.empty(), "--metrics is empty");
  for (const std::string& m : metrics)
    SHAMN_INPUT_CHECK(std::find(kMetrics.begin(), kMetrics.end(), m) != kMetrics.end(),
                      "--metrics: unknown '", m, "' (known: loss, val_loss, lr, grad_norm, tokens_per_s)");
}

std::vector<double> smoothed(const std::vector<double>& v) {
  int64_t finite = 0;
  for (double x : v) finite += std::isfinite(x) ? 1 : 0;
  const double window = std::max(1.0, static_cast<double>(finite) / 40.0);
  const double beta = 1.0 - 1.0 / window;
  std::vector<double> out(v.size(), kNaN);
  double ema = 0, weight = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    ema = beta * ema + (1 - beta) * v[i];
    weight = beta * weight + (1 - beta);  // 1 - beta^n: undoes the pull toward 0 at the start
    out[i] = ema / weight;
  }
  return out;
}

std::string curves_script(const std::vector<RunCurves>& runs, const PlotSpec& spec,
                          const std::string& output) {
  spec.validate();
  if (spec.x == "tokens")
    for (const RunCurves& r : runs)
      SHAMN_INPUT_CHECK(r.tokens_per_step > 0, "--x tokens: run '", r.dir,
                        "' has no config.toml with train.batch_size and train.seq_len");
  const auto wants = [&](const std::string& m) {
    return std::find(spec.metrics.begin(), spec.metrics.end(), m) != spec.metrics.end();
  };
  // Panels: the losses together, then each other quantity alone.
  std::vector<std::string> panels;
  if (wants("loss") || wants("val_loss")) panels.push_back("loss");
  for (const char* m : {"lr", "grad_norm", "tokens_per_s"})
    if (wants(m)) panels.push_back(m);

  std::ostringstream s;
  s << "# Generated by shamn: training curves of " << runs.size() << " run(s).\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunCurves& r = runs[i];
    std::map<int64_t, double> elapsed_at;
    for (size_t k = 0; k < r.steps.size(); ++k) elapsed_at[r.steps[k]] = r.elapsed_s[k];
    const std::vector<double> ema = smoothed(r.loss);
    s << "$train" << i << " << EOD\n";
    for (size_t k = 0; k < r.steps.size(); ++k)
      s << num(x_of(r, spec.x, r.steps[k], r.elapsed_s[k])) << " " << num(r.loss[k]) << " " << num(ema[k])
        << " " << num(r.lr[k]) << " " << num(r.grad_norm[k]) << " " << num(r.tokens_per_s[k]) << "\n";
    s << "EOD\n$val" << i << " << EOD\n";
    for (size_t k = 0; k < r.val_steps.size(); ++k) {
      const auto at = elapsed_at.find(r.val_steps[k]);
      s << num(x_of(r, spec.x, r.val_steps[k], at == elapsed_at.end() ? kNaN : at->second)) << " "
        << num(r.val_loss[k]) << "\n";
    }
    s << "EOD\n";
  }
  const int width = 900, height = 60 + 300 * static_cast<int>(panels.size());
  s << gnuplot_terminal(output, width, height) << "set output " << gnuplot_quoted(output)
    << "\nset grid\nset datafile missing 'NaN'\n"
    << "set key " << (runs.size() > 4 ? "outside right top" : "top right") << " noenhanced\n"
    << "set xlabel "
    << gnuplot_quoted(spec.x == "tokens" ? "training tokens"
                      : spec.x == "time" ? "training time (s)"
                                         : "step")
    << "\n"
    << "set multiplot layout " << panels.size() << ",1\n";
  const std::map<std::string, int> column = {{"lr", 4}, {"grad_norm", 5}, {"tokens_per_s", 6}};
  for (const std::string& panel : panels) {
    std::vector<std::string> items;
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunCurves& r = runs[i];
      const std::string c = kColours[i % std::size(kColours)];
      const std::string title = gnuplot_quoted(r.label);
      const bool has_train = std::any_of(train_series(r, panel).begin(), train_series(r, panel).end(),
                                         [](double v) { return std::isfinite(v); });
      if (panel == "loss") {
        if (wants("loss") && has_train) {
          // The raw loss faint (alpha 0xB0 of 0xFF transparent), its smoothed line over it.
          items.push_back("$train" + std::to_string(i) + " using 1:2 with lines lw 1 lc rgb '#B0" + c +
                          "' notitle");
          items.push_back("$train" + std::to_string(i) + " using 1:3 with lines lw 2 lc rgb '#" + c +
                          "' title " + gnuplot_quoted(r.label + (wants("val_loss") ? " train (EMA)" : "")));
        }
        if (wants("val_loss") && !r.val_steps.empty())
          items.push_back("$val" + std::to_string(i) +
                          " using 1:2 with linespoints dt 2 pt 7 ps 1.2 lc rgb '#" + c + "' title " +
                          gnuplot_quoted(r.label + " val"));
      } else if (has_train) {
        items.push_back("$train" + std::to_string(i) + " using 1:" + std::to_string(column.at(panel)) +
                        " with lines lw 1.5 lc rgb '#" + c + "' title " + title);
      }
    }
    const std::string ylabel = panel == "loss"        ? "loss (nats/token)"
                               : panel == "lr"        ? "learning rate"
                               : panel == "grad_norm" ? "gradient norm (before clipping)"
                                                      : "train tokens/s";
    s << "set title " << gnuplot_quoted(panel) << " noenhanced\nset ylabel " << gnuplot_quoted(ylabel)
      << " noenhanced\n";
    if (items.empty()) {
      // No data yet (a run before its first record): an empty panel that says so.
      s << "set label 1 'no data yet' at graph 0.5, graph 0.5 center\nplot [0:1] [0:1] NaN notitle\n"
        << "unset label 1\n";
      continue;
    }
    s << "plot ";
    for (size_t k = 0; k < items.size(); ++k) s << (k > 0 ? ", \\\n     " : "") << items[k];
    s << "\n";
  }
  s << "unset multiplot\nunset output\n";
  return s.str();
}

void plot_runs(const std::vector<RunCurves>& runs, const PlotSpec& spec, const std::string& output) {
  draw_with_gnuplot(output, [&](const std::string& tmp) { return curves_script(runs, spec, tmp); });
}

std::string refresh_loss_plot(const std::string& run_dir) {
  try {
    if (find_gnuplot().empty())
      return "gnuplot is not installed (apt-get install gnuplot-nox): no " + run_dir + "/plots/loss.svg";
    fs::create_directories(fs::path(run_dir) / "plots");
    RunCurves run = read_run_curves(run_dir);
    run.label = fs::path(run_dir).lexically_normal().filename().string();
    plot_runs({run}, PlotSpec{}, (fs::path(run_dir) / "plots" / "loss.svg").string());
    return "";
  } catch (const std::exception& e) {
    return std::string("no ") + run_dir + "/plots/loss.svg: " + e.what();
  }
}

}  // namespace shamn
