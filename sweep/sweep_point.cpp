#include "sweep/sweep_point.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/timing.h"
#include "layers/flop_counts.h"
#include "layers/parameter_counts.h"
#include "layers/shamn_model.h"
#include "sweep/child_process.h"
#include "train/gnuplot.h"
#include "train/train_checkpoint.h"

namespace shamn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string in(const SweepPoint& p, const std::string& file) { return (fs::path(p.dir) / file).string(); }
std::string run_dir(const SweepPoint& p) { return p.config.train.out_dir; }

// Runs one step of the point; a non-zero exit (not a requested stop) throws
// naming the log.
ChildResult step(const SweepPoint& p, const std::string& what, std::vector<std::string> argv,
                 const std::string& stdout_file) {
  const std::string log = in(p, "log.txt");
  { std::ofstream(log, std::ios::app) << "\n== " << what << "\n"; }
  const ChildResult r = run_child(argv, stdout_file.empty() ? log : stdout_file, log);
  if (stop_requested()) return r;
  if (r.exit_status != 0) {
    // The child's own error message, so the sweep's output says why: the last one
    // after this step's "== " header (the log keeps earlier attempts' errors too).
    std::string reason;
    std::ifstream f(log);
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("== ", 0) == 0) reason.clear();
      if (line.rfind("shamn: ", 0) == 0) reason = line.substr(7);
    }
    throw InputError(
        what + " failed (" +
        (r.signal ? "signal " + std::to_string(r.signal) : "exit status " + std::to_string(r.exit_status)) +
        (reason.empty() ? "" : ": " + reason) + "); see " + log);
  }
  return r;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  SHAMN_INPUT_CHECK(f, "cannot read '", path, "'");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw InputError("'" + path + "' is not valid JSON: " + e.what());
  }
}

struct TrainMetrics {
  double val_loss = NAN, median_tokens_per_s = 0, elapsed_s = 0;
};

// The final evaluation, the median step speed and the training time (the
// trainer carries elapsed_s across resumes) from the run's metrics.jsonl.
TrainMetrics read_train_metrics(const SweepPoint& p) {
  const std::string path = (fs::path(run_dir(p)) / "metrics.jsonl").string();
  std::ifstream f(path);
  SHAMN_INPUT_CHECK(f, "cannot read '", path, "'");
  TrainMetrics m;
  std::vector<double> rates;
  int64_t val_step = -1;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    SHAMN_INPUT_CHECK(!j.is_discarded(), "'", path, "': a line is not JSON: ", line);
    if (j.contains("val_loss")) {
      m.val_loss = j["val_loss"].get<double>();
      val_step = j["step"].get<int64_t>();
    }
    if (j.contains("tokens_per_s")) rates.push_back(j["tokens_per_s"].get<double>());
    if (j.contains("elapsed_s")) m.elapsed_s = j["elapsed_s"].get<double>();
  }
  SHAMN_INPUT_CHECK(val_step == p.config.train.max_steps, "'", path, "' has no evaluation at the last step ",
                    p.config.train.max_steps);
  m.median_tokens_per_s = median(rates);
  return m;
}

// The largest train-child peak RSS seen for this point (a resumed point has several).
int64_t record_peak_rss(const SweepPoint& p, int64_t bytes) {
  const std::string path = in(p, "train_peak_rss_bytes");
  int64_t old = 0;
  std::ifstream(path) >> old;
  const int64_t peak = std::max(old, bytes);
  write_file_atomically(path, std::to_string(peak) + "\n");
  return peak;
}

// The mean of f over the array's elements; NaN (null in JSON) for none.
template <class F>
double mean_of(const json& array, F f) {
  double sum = 0;
  for (const json& x : array) sum += f(x);
  return array.empty() ? NAN : sum / static_cast<double>(array.size());
}

// `shamn analyze` of the final checkpoint on the val file, over the windows
// eval uses: analysis.json, its plots, and the headline numbers of result.json.
// Null when a stop was requested.
json analyze_point(const SweepPoint& p, const PointSettings& s) {
  const std::string ckpt = checkpoint_file(run_dir(p), p.config.train.max_steps);
  SHAMN_INPUT_CHECK(fs::exists(ckpt), "point ", p.name, ": no final checkpoint '", ckpt,
                    "' to analyse; delete ", result_path(p), " to retrain the point");
  std::vector<std::string> argv = {s.exe, "--threads", std::to_string(s.threads), "analyze", ckpt, "--json"};
  argv.insert(argv.end(), {"--data", p.config.data.val_path, "--format", p.config.data.format});
  argv.insert(argv.end(), {"--windows", std::to_string(s.eval_windows), "--seq-len",
                           std::to_string(p.config.train.seq_len)});
  if (!find_gnuplot().empty())
    argv.insert(argv.end(), {"--plots", in(p, "analysis_plots"), "--plot-title", p.name});
  step(p, "analyze", argv, in(p, "analysis.json"));
  if (stop_requested()) return nullptr;
  const json a = read_json(in(p, "analysis.json"));
  const json& thirds = a.at("loss_by_frequency");
  const auto entropy_ratio = [](const json& m) {
    return m.at("entropy").get<double>() / m.at("max_entropy").get<double>();
  };
  const auto slots_read = [](const json& m) { return m.at("slots_read_share").get<double>(); };
  return {{"expert_entropy_ratio", mean_of(a.at("moe"), entropy_ratio)},
          {"memory_slots_read", mean_of(a.at("memory"), slots_read)},
          {"rare_loss", thirds.at(0).at("loss")},
          {"frequent_loss", thirds.at(2).at("loss")}};
}

}  // namespace

std::string result_path(const SweepPoint& p) { return in(p, "result.json"); }

PointState point_state(const SweepPoint& p) {
  if (fs::exists(result_path(p))) {
    const json j = read_json(result_path(p));
    for (const std::string& m : sweep_analysis_metric_names())
      if (!j.contains("metrics") || !j["metrics"].contains(m)) return PointState::unanalysed;
    return PointState::finished;
  }
  if (fs::exists(run_dir(p)) && !list_checkpoints(run_dir(p)).empty()) return PointState::interrupted;
  return PointState::fresh;
}

bool run_point(const SweepPoint& p, const PointSettings& s) {
  if (point_state(p) == PointState::unanalysed) {
    const json metrics = analyze_point(p, s);
    if (metrics.is_null()) return false;
    json r = read_json(result_path(p));
    r["metrics"].update(metrics);
    write_file_atomically(result_path(p), r.dump(2) + "\n", "result");
    return true;
  }
  const std::string threads = std::to_string(s.threads);
  const std::string final_ckpt = checkpoint_file(run_dir(p), p.config.train.max_steps);
  if (!fs::exists(final_ckpt)) {
    std::vector<std::string> argv = {s.exe, "--threads", threads, "train"};
    if (point_state(p) == PointState::interrupted) {
      argv.insert(argv.end(), {"--resume", run_dir(p)});
    } else {
      fs::remove_all(run_dir(p));  // started but never checkpointed: nothing to keep
      argv.push_back(in(p, "config.toml"));
    }
    const ChildResult r = step(p, "train", argv, "");
    record_peak_rss(p, r.peak_rss_bytes);
    if (stop_requested()) return false;
    SHAMN_INPUT_CHECK(fs::exists(final_ckpt), "point ", p.name, ": training ended without '", final_ckpt,
                      "'; see ", in(p, "log.txt"));
  }
  const TrainMetrics train = read_train_metrics(p);

  const std::string shq = in(p, "model_int8.shq");
  step(p, "export",
       {s.exe, "--threads", threads, "export", final_ckpt, "--quant", "int8", "--no-tokenizer", "-o", shq},
       "");
  if (stop_requested()) return false;
  step(p, "eval",
       {s.exe, "--threads", threads, "eval", shq, "--data", p.config.data.val_path, "--format",
        p.config.data.format, "--seq-len", std::to_string(p.config.train.seq_len), "--max-windows",
        std::to_string(s.eval_windows), "--reference", final_ckpt},
       in(p, "eval.json"));
  if (stop_requested()) return false;
  step(p, "bench",
       {s.exe, "--threads", threads, "bench", shq, "--json", "--prompt-tokens", "64", "--decode-tokens", "64",
        "--repeats", "3"},
       in(p, "bench.json"));
  if (stop_requested()) return false;
  const json analysis = analyze_point(p, s);
  if (stop_requested()) return false;
  const json eval = read_json(in(p, "eval.json"));
  const json bench = read_json(in(p, "bench.json"));

  const Shamn model(p.config.model);
  const ParameterCounts counts = count_parameters(model);
  // Unknown (null), not 0, where no train child of a sweep finished the training:
  // a killed sweep's trainer that went on to the final checkpoint alone.
  int64_t peak_rss = 0;
  const bool rss_measured = static_cast<bool>(std::ifstream(in(p, "train_peak_rss_bytes")) >> peak_rss);

  json r;
  r["point"] = p.name;
  r["seed"] = p.seed;
  r["metrics"] = {
      {"val_loss", train.val_loss},
      {"val_ppl", std::exp(train.val_loss)},
      {"train_tokens_per_s", train.median_tokens_per_s},
      {"stored_params", counts.stored},
      {"touched_params_per_token", counts.touched_per_token},
      {"train_flops_per_token", count_flops(p.config.model).train_per_token},
      {"peak_rss_mib", rss_measured ? json(static_cast<double>(peak_rss) / 1048576.0) : json(nullptr)},
      {"train_wall_s", train.elapsed_s},
      {"eval_f32_ppl", eval.at("reference_perplexity").get<double>()},
      {"int8_ppl", eval.at("perplexity").get<double>()},
      {"int8_decode_tok_s", bench.at("decode_tok_s").get<double>()},
      {"int8_file_bytes", bench.at("file_bytes").get<int64_t>()},
  };
  r["metrics"].update(analysis);
  write_file_atomically(result_path(p), r.dump(2) + "\n", "result");
  return true;
}

SweepRow read_point_result(const SweepPoint& p) {
  const json j = read_json(result_path(p));
  SweepRow row{p.name, p.axis_values, p.seed, {}};
  for (const std::string& m : sweep_metric_names()) {
    SHAMN_INPUT_CHECK(j.contains("metrics") && j["metrics"].contains(m), "'", result_path(p),
                      "' has no metric ", m, ": delete it to rerun the point");
    // null: a number the point has none of (no memory layer: no slot use).
    const json& v = j["metrics"][m];
    row.metrics[m] = v.is_null() ? NAN : v.get<double>();
  }
  return row;
}

}  // namespace shamn
