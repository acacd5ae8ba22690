// `shamn analyze MODEL --data TOKENS.bin`: how the model's sparse parts are
// used (train/model_analysis.h; a .shq file: analysis/shq_analysis.h), as
// tables or one JSON object.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/json_text.h"
#include "cli/model_source.h"
#include "cli/shq_analysis.h"
#include "core/hdf5_file.h"
#include "train/analysis_plots.h"
#include "train/gnuplot.h"
#include "train/model_analysis.h"
#include "train/model_checkpoint.h"

namespace shamn::cli {

namespace {

struct AnalyzeArgs {
  std::string model, data, format = "llmc", plots, plot_title;
  int64_t windows = 8, seq_len = 256;
  bool json = false;
};

// JSON has no NaN: null instead.
nlohmann::ordered_json number(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

nlohmann::ordered_json to_json(const AnalyzeArgs& args, const ModelAnalysis& a) {
  nlohmann::ordered_json out = {{"model", args.model},  {"data", args.data},  {"windows", a.windows},
                                {"seq_len", a.seq_len}, {"tokens", a.tokens}, {"loss", number(a.loss)}};
  nlohmann::ordered_json moe = nlohmann::ordered_json::array();
  for (const MoeLayerStats& s : a.moe)
    moe.push_back({{"layer", s.layer},
                   {"expert_share", s.expert_share},
                   {"group_share", s.group_share},
                   {"entropy", s.entropy},
                   {"max_entropy", s.max_entropy},
                   {"busiest_expert", s.busiest_expert},
                   {"busiest_share", s.busiest_share},
                   {"never_chosen", s.never_chosen},
                   {"mean_gate_first", number(s.mean_gate_first)},
                   {"mean_gate_second", number(s.mean_gate_second)}});
  out["moe"] = moe;
  nlohmann::ordered_json memory = nlohmann::ordered_json::array();
  for (const MemoryLayerStats& s : a.memory)
    memory.push_back({{"layer", s.layer},
                      {"slots", s.slots},
                      {"reads", s.reads},
                      {"slots_read", s.slots_read},
                      {"slots_read_share", static_cast<double>(s.slots_read) / static_cast<double>(s.slots)},
                      {"top1pct_share", s.top1pct_share},
                      {"entropy", s.entropy},
                      {"max_entropy", s.max_entropy},
                      {"mean_margin", number(s.mean_margin)}});
  out["memory"] = memory;
  const EmbeddingStats& e = a.embed;
  out["embed"] = {{"vocab", e.vocab},
                  {"buckets", e.buckets},
                  {"hashes", e.hashes},
                  {"tokens_per_bucket_mean", e.tokens_per_bucket_mean},
                  {"tokens_per_bucket_max", e.tokens_per_bucket_max},
                  {"empty_buckets", e.empty_buckets},
                  {"colliding_pairs", e.colliding_pairs},
                  {"colliding_pair_share", e.colliding_pair_share}};
  nlohmann::ordered_json thirds = nlohmann::ordered_json::array();
  for (const FrequencyThird& f : a.thirds)
    thirds.push_back({{"name", f.name},
                      {"types", f.types},
                      {"min_count", f.min_count},
                      {"max_count", f.max_count},
                      {"targets", f.targets},
                      {"loss", number(f.loss)}});
  out["loss_by_frequency"] = thirds;
  nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
  for (const BlockNormStats& b : a.block_sparse)
    blocks.push_back({{"name", b.name},
                      {"blocks", b.blocks},
                      {"min", b.min},
                      {"median", b.median},
                      {"max", b.max},
                      {"cv", b.cv}});
  out["block_norms"] = blocks;
  return out;
}

void print_tables(const AnalyzeArgs& args, const ModelAnalysis& a) {
  std::printf("model %s, data %s: %" PRId64 " windows x %" PRId64 " tokens, loss %.4f\n\n",
              args.model.c_str(), args.data.c_str(), a.windows, a.seq_len, a.loss);
  std::printf("# MoE: shares of expert selections (entropy in nats, max = uniform)\n");
  std::printf("%-6s %8s %8s %8s %14s %7s %11s %11s\n", "layer", "entropy", "max", "ratio", "busiest",
              "unused", "gate 1st", "gate 2nd");
  for (const MoeLayerStats& s : a.moe)
    std::printf("%-6" PRId64 " %8.3f %8.3f %8.3f %5" PRId64 " (%5.3f) %7" PRId64 " %11.3f %11.3f\n", s.layer,
                s.entropy, s.max_entropy, s.entropy / s.max_entropy, s.busiest_expert, s.busiest_share,
                s.never_chosen, s.mean_gate_first, s.mean_gate_second);
  for (const MoeLayerStats& s : a.moe) {
    std::printf("  layer %" PRId64 " group shares:", s.layer);
    for (double g : s.group_share) std::printf(" %.3f", g);
    std::printf("\n");
  }
  std::printf("\n# memory: slot reads\n%-6s %9s %9s %10s %8s %8s %8s\n", "layer", "slots", "read", "top 1%",
              "entropy", "max", "margin");
  for (const MemoryLayerStats& s : a.memory)
    std::printf("%-6" PRId64 " %9" PRId64 " %8.1f%% %9.1f%% %8.3f %8.3f %8.3f\n", s.layer, s.slots,
                100.0 * static_cast<double>(s.slots_read) / static_cast<double>(s.slots),
                100.0 * s.top1pct_share, s.entropy, s.max_entropy, s.mean_margin);
  const EmbeddingStats& e = a.embed;
  std::printf("\n# hash embedding: %" PRId64 " tokens, %" PRId64 " buckets, %" PRId64 " hashes\n", e.vocab,
              e.buckets, e.hashes);
  std::printf("tokens per bucket  mean %.2f, max %" PRId64 ", %" PRId64 " empty buckets\n",
              e.tokens_per_bucket_mean, e.tokens_per_bucket_max, e.empty_buckets);
  std::printf("pairs colliding in every hash  %" PRId64 " (%.3g of all pairs)\n", e.colliding_pairs,
              e.colliding_pair_share);
  std::printf("\n# loss by target frequency (token types in the data file, by count, in thirds)\n");
  std::printf("%-9s %7s %15s %9s %8s\n", "third", "types", "count range", "targets", "loss");
  for (const FrequencyThird& f : a.thirds)
    std::printf("%-9s %7" PRId64 " %7" PRId64 "-%-7" PRId64 " %9" PRId64 " %8.4f\n", f.name.c_str(), f.types,
                f.min_count, f.max_count, f.targets, f.loss);
  std::printf("\n# block-sparse active-block norms\n%-34s %7s %9s %9s %9s %7s\n", "matrix", "blocks", "min",
              "median", "max", "cv");
  for (const BlockNormStats& b : a.block_sparse)
    std::printf("%-34s %7" PRId64 " %9.4f %9.4f %9.4f %7.3f\n", b.name.c_str(), b.blocks, b.min, b.median,
                b.max, b.cv);
}

ModelAnalysis analyze(const AnalyzeArgs& a, const TokenFile& data) {
  if (is_shq_file(a.model))
    return analyze_shq(InferModel(ShqFile::open(a.model)), data, a.windows, a.seq_len);
  const Hdf5Reader reader(a.model);
  const ModelConfig config = read_checkpoint_config(reader);
  Shamn model(config);
  load_model_tensors(reader, model);
  return analyze_model(model, data, a.windows, a.seq_len);
}

void run_analyze(const AnalyzeArgs& a) {
  SHAMN_INPUT_CHECK(a.plots.empty() || !find_gnuplot().empty(),
                    "--plots: gnuplot is not installed (apt-get install gnuplot-nox)");
  // Made before the work, so a bad --plots costs none; removed again (if this
  // run made it and it is still empty) when the work fails.
  const bool new_plot_dir = !a.plots.empty() && !std::filesystem::exists(a.plots);
  if (!a.plots.empty()) make_plot_dir(a.plots);
  const ModelAnalysis result = [&] {
    try {
      const TokenFile data(a.data, a.format == "u16" ? TokenFormat::u16 : TokenFormat::llmc);
      return analyze(a, data);
    } catch (...) {
      std::error_code ignored;
      if (new_plot_dir) std::filesystem::remove(a.plots, ignored);
      throw;
    }
  }();
  if (a.json)
    std::printf("%s\n", json_text(to_json(a, result)).c_str());
  else
    print_tables(a, result);
  if (!a.plots.empty()) {
    const std::vector<std::string> files = write_analysis_plots(
        result, a.plot_title.empty() ? std::filesystem::path(a.model).filename().string() : a.plot_title,
        a.plots);
    // With --json, stdout is the JSON object alone.
    std::FILE* note = a.json ? stderr : stdout;
    std::fprintf(note, "%s%zu plots in %s\n", a.json ? "" : "\n", files.size(), a.plots.c_str());
  }
}

}  // namespace

void register_analyze_command(CLI::App& app) {
  auto a = std::make_shared<AnalyzeArgs>();
  CLI::App* c = app.add_subcommand(
      "analyze",
      "how a model's sparse parts are used on a token file: expert load, memory slots, hash buckets, "
      "loss by token frequency, block norms");
  c->add_option("model", a->model,
                "checkpoint (.h5) or model file (.shq: the runtime's forward on the weights as stored)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--data", a->data, "token file (--format); token frequencies are counted over all of it")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--format", a->format, "llmc or u16")
      ->capture_default_str()
      ->check(CLI::IsMember({"llmc", "u16"}));
  c->add_option("--windows", a->windows, "windows analysed (consecutive, from the start)")
      ->capture_default_str()
      ->check(whole_number(1));
  c->add_option("--seq-len", a->seq_len, "window length T")->capture_default_str()->check(whole_number(1));
  c->add_flag("--json", a->json, "one JSON object instead of tables");
  c->add_option("--plots", a->plots,
                "also draw the expert-load and memory slot-use distributions into this directory "
                "(expert_load and memory_slots, .png and .svg; needs gnuplot)");
  c->add_option("--plot-title", a->plot_title,
                "what the plots are headed with (default: the model file's name)");
  c->callback([a] { run_analyze(*a); });
}

}  // namespace shamn::cli
