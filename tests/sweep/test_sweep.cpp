// Sweep files: expansion (axes x seeds, names, overrides), bad sweep files each
// naming the file and key, the FLOP estimate, and the CSV / summary / plot data
// computed from rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "layers/flop_counts.h"
#include "sweep/sweep_report.h"
#include "sweep/sweep_spec.h"
#include "tests/scratch_dir.h"

using namespace shamn;
namespace fs = std::filesystem;

namespace {

const std::string kBase =
    "[model]\nvocab_size = 64\ndim = 64\nn_layers = 2\n[model.embed]\nbuckets = 32\n"
    "[model.sparse]\nblock = 16\nsparsity = 0.5\n[model.memory]\nlayers = [1]\nsize = 256\ntopk = 4\n"
    "[model.moe]\ngroups = 2\nexperts_per_group = 2\nhidden = 64\n"
    "[data]\ntrain_path = \"t.bin\"\nval_path = \"v.bin\"\n"
    "[train]\nbatch_size = 4\nseq_len = 32\nmax_steps = 10\nout_dir = \"runs/x\"\n[optim]\nlr = 1e-3\n";

// A directory with base.toml, fresh per test.
fs::path sweep_dir(const std::string& name) {
  const fs::path dir = test::scratch_dir("sweep_" + name);
  std::ofstream(dir / "base.toml") << kBase;
  return dir;
}

SweepSpec spec_of(const fs::path& dir, const std::string& body) {
  const std::string path = (dir / "sweep.toml").string();
  std::ofstream(path) << body;
  return SweepSpec::from_file(path);
}

std::string expand_error(const fs::path& dir, const std::string& body) {
  try {
    expand_sweep(spec_of(dir, body));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a sweep expands to axes x seeds points with stable names and resolved configs", "[sweep]") {
  const fs::path dir = sweep_dir("expand");
  const SweepSpec spec =
      spec_of(dir,
              "[sweep]\nbase = \"base.toml\"\nout_dir = \"out\"\nseeds = [1, 2, 3]\n"
              "[sweep.set]\ntrain.max_steps = 7\n"
              "[sweep.axes]\nmodel.sparse.sparsity = [0.0, 0.75]\nmodel.memory.size = [256, 1024]\n");
  CHECK(spec.base == (dir / "base.toml").string());
  REQUIRE(spec.axes.size() == 2);
  CHECK(spec.axes[0].key == "model.sparse.sparsity");  // file order, not alphabetical
  const std::vector<SweepPoint> points = expand_sweep(spec);
  REQUIRE(points.size() == 2 * 2 * 3);
  CHECK(points[0].name == "sparse.sparsity=0.0,memory.size=256,seed=1");
  CHECK(points[1].name == "sparse.sparsity=0.0,memory.size=256,seed=2");
  CHECK(points[3].name == "sparse.sparsity=0.0,memory.size=1024,seed=1");
  CHECK(points[11].name == "sparse.sparsity=0.75,memory.size=1024,seed=3");
  for (const SweepPoint& p : points) {
    CHECK(p.config.train.max_steps == 7);
    CHECK(p.config.train.seed == p.seed);
    CHECK(p.dir == (fs::path("out") / p.name).string());
    CHECK(p.config.train.out_dir == (fs::path(p.dir) / "run").string());
  }
  CHECK(points[11].config.model.sparsity == 0.75);
  CHECK(points[11].config.model.memory_size == 1024);
  CHECK(points[4].seed == 2);
  CHECK(points[4].axis_values == std::vector<std::string>{"0.0", "1024"});
  // Command-line overrides apply to every point, after [sweep.set].
  const std::vector<SweepPoint> again = expand_sweep(spec, {"train.max_steps=9"});
  CHECK(again[5].config.train.max_steps == 9);
}

TEST_CASE("a sweep without seeds or axes is one point with the base config's seed", "[sweep]") {
  const fs::path dir = sweep_dir("single");
  const std::vector<SweepPoint> points =
      expand_sweep(spec_of(dir, "[sweep]\nbase = \"base.toml\"\nout_dir = \"o\"\n"));
  REQUIRE(points.size() == 1);
  CHECK(points[0].name == "seed=1");
  CHECK(point_name_part("data.tokenizer", "\"a b/c\"") == "data.tokenizer=_a_b_c_");
}

TEST_CASE("bad sweep files are errors naming the sweep file and the key", "[sweep]") {
  const fs::path dir = sweep_dir("bad");
  const std::string head = "[sweep]\nbase = \"base.toml\"\nout_dir = \"o\"\n";
  struct Case {
    std::string body, needle;
  };
  const std::vector<Case> cases = {
      {head + "colour = 1\n", "unknown key sweep.colour"},
      {"[other]\n" + head, "unknown top-level key 'other'"},
      {"[sweep]\nout_dir = \"o\"\n", "sweep.base"},
      {"[sweep]\nbase = \"nope.toml\"\nout_dir = \"o\"\n", "sweep.base: the base config"},
      {head + "[sweep.axes]\nmodel.sparse.sparsity = []\n",
       "sweep.axes.model.sparse.sparsity must be a non-empty"},
      {head + "[sweep.axes]\nmodel.sparse.spars = [0.1]\n", "'model.sparse.spars' is not a run config key"},
      {head + "[sweep.set]\ntrain.steps = 3\n", "sweep.set.train.steps"},
      {head + "[sweep.axes]\nmodel.sparse.sparsity = [1, 2]\n", "sweep.axes.model.sparse.sparsity"},
      {head + "[sweep.axes]\nmodel.sparse.sparsity = [0.1, 2]\n", "mixes value types"},
      {head + "[sweep.axes]\nmodel.sparse.sparsity = [0.1, 0.1]\n", "lists 0.1 twice"},
      {head + "[sweep.axes]\nmodel.sparse.sparsity = [0.5, 1.5]\n", "point sparse.sparsity=1.5"},
      {head + "[sweep.axes]\ntrain.seed = [1, 2]\n", "sweep.seeds"},
      {head + "seeds = [1, \"2\"]\n", "key 'sweep.seeds' must be an array of integers"},
      {head + "jobs = 0\n", "sweep.jobs must be >= 1"},
      {head + "jobs = 257\n", "sweep.jobs must be <= 256"},
      {head + "seeds = [-3, 7]\n", "sweep.seeds lists -3: seeds are >= 0"},
      // Two values that differ only where a directory name has '_'.
      {head + "[sweep.axes]\ndata.train_path = [\"d_x/t.bin\", \"d x/t.bin\"]\n",
       "two points would share the directory 'data.train_path=_d_x_t.bin_,seed=1': "
       "sweep.axes.data.train_path "
       "values 'd_x/t.bin' and 'd x/t.bin'"},
      {head + "[sweep.axes]\ndata.train_path = [\"" + std::string(300, 'a') + "\", \"t.bin\"]\n",
       "longer than a directory name may be (255)"},
      // A value for a table would leave every key under it at its default.
      {head + "[sweep.set]\nmodel.moe = 4\n",
       "key 'model.moe' must be a table ([model.moe]), got an integer"},
      {head + "[sweep.set]\ndata.val_path = \"\"\n", "data.val_path"},
      // buckets is set, so the embedding sparsity changes nothing.
      {head + "[sweep.axes]\nmodel.embed.sparsity = [0.5, 0.9]\n", "resolve to the same model"},
      // 4 blocks of 16: 0.8 and 0.9 both keep round(0.8) = round(0.4) -> 1 block.
      {head + "[sweep.axes]\nmodel.sparse.sparsity = [0.8, 0.9]\n", "an axis value has no effect"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    const std::string e = expand_error(dir, c.body);
    CHECK_THAT(e, Catch::Contains((dir / "sweep.toml").string()));
    CHECK_THAT(e, Catch::Contains(c.needle));
  }
}

TEST_CASE("FLOPs per token follow the documented formula and fall with sparsity", "[sweep]") {
  ModelConfig c = RunConfig::from_toml(kBase, "base").model;
  c.sparsity = 0.0;
  // D=64, V=64, h=2, K=4, b=16, dense: a = 4 blocks; memory n=16, key_dim=32, topk 4 on layer 1;
  // MoE G=2, E=2, k=2, H=64.
  const int64_t block_sparse_dense = 64 * 4 * 16;
  const int64_t per_layer = 64 * 4 + block_sparse_dense + 64 * 2 + 64 * 4 + 2 * (2 * block_sparse_dense);
  const int64_t memory = 64 * 32 + 16 * 32 + 4 * 64;
  // Tied hash head: 32 bucket scores of D, then 2 gathered per logit.
  const int64_t macs = 2 * 64 + (32 * 64 + 64 * 2) + 2 * per_layer + memory;
  CHECK(count_flops(c).forward_per_token == 2 * macs);
  CHECK(count_flops(c).train_per_token == 6 * macs);
  ModelConfig untied = c;
  untied.tie_head = false;  // a dense V x D head
  CHECK(count_flops(untied).forward_per_token - count_flops(c).forward_per_token ==
        2 * (64 * 64 - (32 * 64 + 64 * 2)));
  ModelConfig sparse = c;
  sparse.sparsity = 0.75;  // a = 1 block of 4
  CHECK(count_flops(c).forward_per_token - count_flops(sparse).forward_per_token ==
        2 * 2 * 3 * (64 * 16) * 5);
}

TEST_CASE("results.csv, summary.md and the plot data from sweep rows", "[sweep]") {
  const std::vector<SweepAxis> axes = {{"model.sparse.sparsity", {"0.0", "0.5"}}};
  std::vector<SweepRow> rows;
  const double ppl[4] = {10.0, 12.0, 20.0, 20.0};
  for (int i = 0; i < 4; ++i) {
    SweepRow r{"p" + std::to_string(i), {i < 2 ? "0.0" : "0.5"}, i % 2 + 1, {}};
    for (const std::string& m : sweep_metric_names()) r.metrics[m] = 1.5;
    r.metrics["val_ppl"] = ppl[i];
    r.metrics["stored_params"] = 1000 - 100 * i;
    rows.push_back(r);
  }
  const MeanStd s = mean_std({10.0, 12.0});
  CHECK(s.mean == Approx(11.0));
  CHECK(s.std == Approx(std::sqrt(2.0)));  // sample std: n - 1
  CHECK(mean_std({5.0}).std == 0.0);

  const std::string csv = results_csv(axes, rows);
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  CHECK(header.rfind("point,model.sparse.sparsity,train.seed,val_loss,val_ppl,", 0) == 0);
  CHECK(std::count(header.begin(), header.end(), ',') == 2 + static_cast<long>(sweep_metric_names().size()));
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    CHECK(std::count(line.begin(), line.end(), ',') == std::count(header.begin(), header.end(), ','));
  }
  CHECK(n == 4);
  CHECK_THAT(csv, Catch::Contains("p2,0.5,1,1.5,20,1.5,800,"));

  SweepSpec spec;
  spec.path = "s.toml";
  spec.axes = axes;
  const std::string md = summary_markdown(spec, rows);
  CHECK_THAT(md, Catch::Contains("| 0.0 | 2 | 1.5 +- 0 | 11 +- 1.41421 |"));
  CHECK_THAT(md, Catch::Contains("| 0.5 | 2 | 1.5 +- 0 | 20 +- 0 |"));
  CHECK_THAT(md, !Catch::Contains("without a result"));
  // A metric a point has no number for (null in its result.json) is left out of its
  // group's mean, which says over how many; a group with none of it shows nan.
  rows[1].metrics["peak_rss_mib"] = NAN;
  rows[2].metrics["peak_rss_mib"] = NAN;
  rows[3].metrics["peak_rss_mib"] = NAN;
  rows[0].metrics["peak_rss_mib"] = 31.5;
  const std::string unmeasured = summary_markdown(spec, rows);
  CHECK_THAT(unmeasured, Catch::Contains(" | 31.5 (n 1) | ") && Catch::Contains(" | nan | "));
  rows[0].metrics["peak_rss_mib"] = rows[1].metrics["peak_rss_mib"] = rows[2].metrics["peak_rss_mib"] =
      rows[3].metrics["peak_rss_mib"] = 1.5;
  const std::string with_failed = summary_markdown(spec, rows, {"sparse.sparsity=0.9,seed=1"});
  CHECK_THAT(with_failed, Catch::Contains("1 point without a result") &&
                              Catch::Contains("- `sparse.sparsity=0.9,seed=1`"));

  CHECK(plot_axis(axes) == 0);
  const std::string tsv = plot_data_tsv(axes, rows);
  CHECK_THAT(tsv, Catch::Contains("\n0\tall\t1.5\t0\t11\t1.41421\t"));
  CHECK_THAT(tsv, Catch::Contains("\n0.5\tall\t1.5\t0\t20\t0\t"));
  const std::string script = gnuplot_script(axes, rows, "d.tsv", "plots");
  CHECK_THAT(script, Catch::Contains("set output \"plots/val_ppl.png\""));
  CHECK_THAT(script, Catch::Contains("set output \"plots/f32_vs_int8.svg\""));
  CHECK_THAT(script, Catch::Contains("\"d.tsv\" index 0 using 1:5:6 with yerrorlines"));
}

TEST_CASE("the shipped sweep files expand to distinct models", "[sweep]") {
  const std::string dir = std::string(SHAMN_SOURCE_DIR) + "/configs/ablations/";
  const std::vector<SweepPoint> tiny = expand_sweep(SweepSpec::from_file(dir + "tiny.toml"));
  CHECK(tiny.size() == 4);
  const std::vector<SweepPoint> sparsity = expand_sweep(SweepSpec::from_file(dir + "sparsity.toml"));
  REQUIRE(sparsity.size() == 15);
  std::vector<int64_t> blocks;
  for (size_t i = 0; i < sparsity.size(); i += 3)
    blocks.push_back(sparsity[i].config.model.mixer().out.active_blocks());
  CHECK(blocks == std::vector<int64_t>{16, 8, 4, 2, 1});
  CHECK(sparsity[14].name == "sparse.sparsity=0.95,seed=3");
}
