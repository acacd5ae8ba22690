#include "sweep/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace shamn {

namespace {

// Integers print without a fraction, everything else with 6 significant digits.
std::string number(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::round(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

bool is_number(const std::string& s) {
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// The values of every axis but `skip`, joined: a group's series label.
std::string label(const std::vector<SweepAxis>& axes, const std::vector<std::string>& values, int skip) {
  std::string out;
  for (size_t a = 0; a < axes.size(); ++a) {
    if (static_cast<int>(a) == skip) continue;
    if (!out.empty()) out += ' ';
    out += point_name_part(axes[a].key, values[a]);
  }
  return out.empty() ? "all" : out;
}

// Series of the plots: the distinct values of the other axes, in first-seen order.
std::vector<std::string> plot_series(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows) {
  std::vector<std::string> series;
  for (const SweepRow& r : rows) {
    const std::string l = label(axes, r.axis_values, plot_axis(axes));
    if (std::find(series.begin(), series.end(), l) == series.end()) series.push_back(l);
  }
  return series;
}

}  // namespace

const std::vector<std::string>& sweep_metric_names() {
  static const std::vector<std::string> names = {"val_loss",
                                                 "val_ppl",
                                                 "train_tokens_per_s",
                                                 "stored_params",
                                                 "touched_params_per_token",
                                                 "train_flops_per_token",
                                                 "peak_rss_mib",
                                                 "train_wall_s",
                                                 "eval_f32_ppl",
                                                 "int8_ppl",
                                                 "int8_decode_tok_s",
                                                 "int8_file_bytes",
                                                 "expert_entropy_ratio",
                                                 "memory_slots_read",
                                                 "rare_loss",
                                                 "frequent_loss"};
  return names;
}

const std::vector<std::string>& sweep_analysis_metric_names() {
  static const std::vector<std::string> names(sweep_metric_names().end() - 4, sweep_metric_names().end());
  return names;
}

MeanStd mean_std(const std::vector<double>& values) {
  MeanStd r;
  r.n = static_cast<int64_t>(values.size());
  if (r.n == 0) return r;
  for (double v : values) r.mean += v;
  r.mean /= static_cast<double>(r.n);
  if (r.n > 1) {
    double ss = 0;
    for (double v : values) ss += (v - r.mean) * (v - r.mean);
    r.std = std::sqrt(ss / static_cast<double>(r.n - 1));
  }
  return r;
}

std::string results_csv(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows) {
  std::ostringstream out;
  out << "point";
  for (const SweepAxis& a : axes) out << "," << csv_field(a.key);
  out << ",train.seed";
  for (const std::string& m : sweep_metric_names()) out << "," << m;
  out << "\n";
  for (const SweepRow& r : rows) {
    out << csv_field(r.name);
    for (const std::string& v : r.axis_values) out << "," << csv_field(v);
    out << "," << r.seed;
    for (const std::string& m : sweep_metric_names()) out << "," << number(r.metrics.at(m));
    out << "\n";
  }
  return out.str();
}

MeanStd SweepGroup::metric(const std::string& name) const {
  std::vector<double> v;
  for (const SweepRow* r : rows)
    if (!std::isnan(r->metrics.at(name))) v.push_back(r->metrics.at(name));
  if (v.empty()) return {NAN, NAN, 0};
  return mean_std(v);
}

std::vector<SweepGroup> group_by_seed(const std::vector<SweepRow>& rows) {
  std::vector<SweepGroup> groups;
  for (const SweepRow& r : rows) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const SweepGroup& g) { return g.axis_values == r.axis_values; });
    if (it == groups.end()) {
      groups.push_back({r.axis_values, {}});
      it = groups.end() - 1;
    }
    it->rows.push_back(&r);
  }
  return groups;
}

std::string summary_markdown(const SweepSpec& spec, const std::vector<SweepRow>& rows,
                             const std::vector<std::string>& unfinished) {
  std::ostringstream out;
  out << "# Sweep summary: " << spec.path << "\n\n"
      << "Base config `" << spec.base << "`; " << rows.size() << " finished runs. "
      << "Each cell is the mean +- sample standard deviation over the seeds (n runs).\n\n|";
  for (const SweepAxis& a : spec.axes) out << " " << a.key << " |";
  out << " n |";
  for (const std::string& m : sweep_metric_names()) out << " " << m << " |";
  out << "\n|";
  for (size_t i = 0; i < spec.axes.size() + 1 + sweep_metric_names().size(); ++i) out << " --- |";
  out << "\n";
  for (const SweepGroup& g : group_by_seed(rows)) {
    out << "|";
    for (const std::string& v : g.axis_values) out << " " << v << " |";
    out << " " << g.rows.size() << " |";
    for (const std::string& m : sweep_metric_names()) {
      const MeanStd s = g.metric(m);
      out << " " << number(s.mean);
      if (s.n > 1) out << " +- " << number(s.std);
      if (s.n > 0 && s.n < static_cast<int64_t>(g.rows.size())) out << " (n " << s.n << ")";
      out << " |";
    }
    out << "\n";
  }
  if (!unfinished.empty()) {
    out << "\n"
        << unfinished.size() << " point" << (unfinished.size() == 1 ? "" : "s")
        << " without a result (failed or stopped: see each point's log.txt; rerun the sweep to retry):\n\n";
    for (const std::string& name : unfinished) out << "- `" << name << "`\n";
  }
  return out.str();
}

int plot_axis(const std::vector<SweepAxis>& axes) {
  for (size_t a = 0; a < axes.size(); ++a)
    if (axes[a].key == "model.sparse.sparsity") return static_cast<int>(a);
  for (size_t a = 0; a < axes.size(); ++a)
    if (std::all_of(axes[a].values.begin(), axes[a].values.end(), is_number)) return static_cast<int>(a);
  return -1;
}

std::string plot_data_tsv(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows) {
  const int xa = plot_axis(axes);
  const std::vector<SweepGroup> groups = group_by_seed(rows);
  // One block per series (gnuplot's `index`), two blank lines apart, sorted by x.
  const std::vector<std::string> series = plot_series(axes, rows);
  std::ostringstream out;
  out << "# x\tseries";
  for (const std::string& m : sweep_metric_names()) out << "\t" << m << "_mean\t" << m << "_std";
  out << "\n";
  for (size_t s = 0; s < series.size(); ++s) {
    if (s > 0) out << "\n\n";
    std::vector<std::pair<double, const SweepGroup*>> block;
    for (const SweepGroup& g : groups)
      if (label(axes, g.axis_values, xa) == series[s])
        block.emplace_back(
            xa >= 0 ? std::strtod(g.axis_values[xa].c_str(), nullptr) : static_cast<double>(block.size()),
            &g);
    std::stable_sort(block.begin(), block.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [x, g] : block) {
      out << number(x) << "\t" << series[s];
      for (const std::string& m : sweep_metric_names()) {
        const MeanStd v = g->metric(m);
        out << "\t" << number(v.mean) << "\t" << number(v.std);
      }
      out << "\n";
    }
  }
  return out.str();
}

std::string gnuplot_script(const std::vector<SweepAxis>& axes, const std::vector<SweepRow>& rows,
                           const std::string& data_file, const std::string& plot_dir) {
  const int xa = plot_axis(axes);
  const std::string xlabel = xa >= 0 ? axes[xa].key : "point";
  const std::vector<std::string> series = plot_series(axes, rows);
  auto col = [](const std::string& metric, bool std) {
    const auto& names = sweep_metric_names();
    const size_t j = static_cast<size_t>(std::find(names.begin(), names.end(), metric) - names.begin());
    return std::to_string(3 + 2 * j + (std ? 1 : 0));
  };
  std::ostringstream s;
  s << "# Generated by shamn sweep: the plots of this sweep from " << data_file << ".\n"
    << "set datafile separator \"\\t\"\nset key top left box\nset grid\n"
    // Room around the data so the error bars at the ends show.
    << "set offsets graph 0.05, graph 0.05, graph 0.05, graph 0.05\n"
    << "has_pngcairo = strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0\n";
  struct Plot {
    std::string file, title, xlabel, ylabel;
    std::vector<std::pair<std::string, std::string>> curves;  // using-spec, title suffix
    bool lines;
  };
  const std::vector<Plot> plots = {
      {"val_ppl",
       "validation perplexity",
       xlabel,
       "val perplexity",
       {{"1:" + col("val_ppl", false) + ":" + col("val_ppl", true), ""}},
       true},
      {"tokens_per_s",
       "training speed",
       xlabel,
       "train tokens/s",
       {{"1:" + col("train_tokens_per_s", false) + ":" + col("train_tokens_per_s", true), ""}},
       true},
      {"ppl_vs_params",
       "perplexity vs stored parameters",
       "stored parameters",
       "val perplexity",
       {{col("stored_params", false) + ":" + col("val_ppl", false) + ":" + col("val_ppl", true), ""}},
       false},
      {"f32_vs_int8",
       "f32 vs int8 perplexity (shamn eval, same windows)",
       xlabel,
       "perplexity",
       {{"1:" + col("eval_f32_ppl", false) + ":" + col("eval_f32_ppl", true), " f32"},
        {"1:" + col("int8_ppl", false) + ":" + col("int8_ppl", true), " int8"}},
       true},
      {"loss_by_frequency",
       "val loss on the rarest and most frequent third of token types (shamn analyze)",
       xlabel,
       "loss (nats/token)",
       {{"1:" + col("rare_loss", false) + ":" + col("rare_loss", true), " rare third"},
        {"1:" + col("frequent_loss", false) + ":" + col("frequent_loss", true), " frequent third"}},
       true},
      {"sparse_use",
       "use of the sparse parts (shamn analyze)",
       xlabel,
       "share",
       {{"1:" + col("expert_entropy_ratio", false) + ":" + col("expert_entropy_ratio", true),
         " expert-load entropy / max"},
        {"1:" + col("memory_slots_read", false) + ":" + col("memory_slots_read", true),
         " memory slots read"}},
       true},
  };
  for (const Plot& p : plots) {
    for (const char* term : {"png", "svg"}) {
      if (std::string(term) == "png")
        s << "if (has_pngcairo) { set terminal pngcairo size 800,560 } else { set terminal png size 800,560 "
             "}\n";
      else
        s << "set terminal svg size 800,560 dynamic\n";
      s << "set output \"" << plot_dir << "/" << p.file << "." << term
        << "\"\n"
        // Parameter counts read better as 5.4M than 5.4x10^6.
        << "set format x \"" << (p.file == "ppl_vs_params" ? "%.1s%c" : "% h") << "\"\n"
        << "set title \"" << p.title << "\" noenhanced\nset xlabel \"" << p.xlabel << "\" noenhanced\n"
        << "set ylabel \"" << p.ylabel << "\" noenhanced\nplot";
      bool first = true;
      for (size_t i = 0; i < series.size(); ++i)
        for (const auto& [using_spec, suffix] : p.curves) {
          s << (first ? " " : ", \\\n     ") << "\"" << data_file << "\" index " << i << " using "
            << using_spec << " with " << (p.lines ? "yerrorlines" : "yerrorbars") << " title \""
            << (series[i] == "all"
                    ? (suffix.empty() ? std::string("mean +- std over seeds") : suffix.substr(1))
                    : series[i] + suffix)
            << "\" noenhanced";
          first = false;
        }
      s << "\nunset output\n";
    }
  }
  return s.str();
}

}  // namespace shamn
