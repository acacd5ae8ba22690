// Run configs: the shipped configs load, the resolved TOML round-trips, --set
// overrides, and a table of bad configs each giving a message that names the
// file, line and key.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/check.h"
#include "core/config_table.h"
#include "train/run_config.h"

using namespace shamn;

namespace {

// A complete, valid config; cases below append to or replace parts of it.
const std::string kModel =
    "[model]\nvocab_size = 512\ndim = 64\nn_layers = 2\n"             // lines 1-4
    "[model.sparse]\nblock = 16\n"                                    // 5-6
    "[model.memory]\nsize = 256\ntopk = 4\n"                          // 7-9
    "[model.moe]\ngroups = 2\nexperts_per_group = 2\nhidden = 64\n";  // 10-13
const std::string kData = "[data]\ntrain_path = \"t.bin\"\n";         // 14-15
const std::string kTrain =
    "[train]\nbatch_size = 4\nseq_len = 32\nmax_steps = 10\nout_dir = \"runs/x\"\n";  // 16-20
const std::string kOptim = "[optim]\nlr = 1e-3\n";                                    // 21-22

std::string valid() { return kModel + kData + kTrain + kOptim; }

std::string error_of(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    ConfigTable table = ConfigTable::parse(text, "run.toml");
    for (const std::string& s : sets) table.set_from_text(s);
    RunConfig::from_table(table);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a minimal run config gets the documented defaults", "[train][config]") {
  const RunConfig c = RunConfig::from_toml(valid(), "run.toml");
  CHECK(c.data.train_path == "t.bin");
  CHECK(c.data.val_path.empty());
  CHECK(c.data.format == "llmc");
  CHECK(c.train.batch_size == 4);
  CHECK(c.train.grad_accum == 1);
  CHECK(c.train.seed == 1);
  CHECK(c.train.keep_last == 3);
  CHECK(c.train.prefetch);
  CHECK(c.train.precision == "f32");
  CHECK(c.train.init == "normal");
  CHECK(c.train.init_std == 0.02);
  CHECK(c.weight_init().scheme == InitScheme::normal);
  CHECK(!c.weight_init().scale_residual);
  CHECK(c.to_toml().find("precision") == std::string::npos);            // written only when bf16
  CHECK(c.to_toml().find("init_scale_residual") == std::string::npos);  // only when true
  CHECK(c.optim.lr == 1e-3);
  CHECK(c.optim.grad_clip == 1.0);
  CHECK(c.optim.beta2 == 0.95);
  CHECK(c.log.every == 10);
  CHECK(c.log.progress == "auto");
  CHECK(c.tokens_per_step() == 4 * 32);
}

TEST_CASE("the resolved run config round-trips exactly", "[train][config]") {
  RunConfig c = RunConfig::from_toml(valid(), "run.toml");
  c.data.tokenizer = "odd \"name\"\\with\ttab";
  c.optim.lr = 1.0 / 3.0;
  c.train.precision = "bf16";
  c.train.init = "fan_in";
  c.train.init_std = 0.05;
  const std::string text = c.to_toml();
  const RunConfig d = RunConfig::from_toml(text, "resolved");
  CHECK(d.to_toml() == text);
  CHECK(d.data.tokenizer == c.data.tokenizer);
  CHECK(d.optim.lr == c.optim.lr);
  CHECK(d.train.precision == "bf16");
  CHECK(d.weight_init().scheme == InitScheme::fan_in);
  CHECK(d.weight_init().std == 0.05);

  c.train.init = "normal";
  c.train.init_scale_residual = true;
  const RunConfig e = RunConfig::from_toml(c.to_toml(), "resolved");
  CHECK(e.to_toml() == c.to_toml());
  CHECK(e.weight_init().scale_residual);
}

TEST_CASE("changed_settings names each key that differs, in order, and not train.out_dir",
          "[train][config]") {
  const RunConfig a = RunConfig::from_toml(valid(), "run.toml");
  CHECK(changed_settings(a, a).empty());
  RunConfig b = a;
  b.train.out_dir = "elsewhere";
  CHECK(changed_settings(a, b).empty());
  b.train.batch_size = 8;
  b.optim.lr = 0.1;
  b.train.precision = "bf16";  // written only when not f32
  b.data.val_path = "v.bin";
  CHECK(changed_settings(a, b) == std::vector<std::string>{"data.val_path '' -> 'v.bin'",
                                                           "train.batch_size 4 -> 8", "optim.lr 0.001 -> 0.1",
                                                           "train.precision (unset) -> 'bf16'"});
  CHECK(changed_settings(b, a) ==
        std::vector<std::string>{"data.val_path 'v.bin' -> ''", "train.batch_size 8 -> 4",
                                 "train.precision 'bf16' -> (unset)", "optim.lr 0.1 -> 0.001"});
  RunConfig c = a;
  c.model.memory_topk = 2;  // a key of a nested table
  CHECK(changed_settings(a, c) == std::vector<std::string>{"model.memory.topk 4 -> 2"});
}

TEST_CASE("run config: --set overrides keys of every section with TOML values", "[train][config]") {
  ConfigTable t = ConfigTable::parse(valid(), "run.toml");
  t.set_from_text("train.max_steps=500");
  t.set_from_text("optim.lr = 0.01");
  t.set_from_text("data.val_path=\"v.bin\"");
  t.set_from_text("model.dim=128");
  t.set_from_text("log.progress=\"never\"");
  const RunConfig c = RunConfig::from_table(t);
  CHECK(c.train.max_steps == 500);
  CHECK(c.optim.lr == 0.01);
  CHECK(c.data.val_path == "v.bin");
  CHECK(c.model.dim == 128);
  CHECK(c.log.progress == "never");
}

TEST_CASE("bad run configs name the file, line and key", "[train][config]") {
  struct Case {
    std::string text;
    std::vector<std::string> sets;
    std::string expected;
  };
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  const Case cases[] = {
      // unknown keys, anywhere
      {valid() + "[train.extra]\nx = 1\n", {}, "run.toml:23: unknown key 'train.extra'"},
      {replace(valid(), "batch_size = 4", "batch_sise = 4"),
       {},
       "run.toml:17: unknown key 'train.batch_sise'"},
      {valid() + "[logging]\nevery = 1\n", {}, "run.toml:23: unknown key 'logging'"},
      // wrong types: no int/float or bool coercion
      {replace(valid(), "lr = 1e-3", "lr = 1"),
       {},
       "run.toml:22: key 'optim.lr' must be a float, got an integer"},
      {replace(valid(), "max_steps = 10", "max_steps = 10.0"),
       {},
       "run.toml:19: key 'train.max_steps' must be an integer, got a float"},
      {valid() + "[log]\nevery = \"10\"\n",
       {},
       "run.toml:24: key 'log.every' must be an integer, got a string"},
      {replace(valid(), "out_dir = \"runs/x\"", "out_dir = \"runs/x\"\nprefetch = 1"),
       {},
       "run.toml:21: key 'train.prefetch' must be a bool"},
      {replace(valid(), "train_path = \"t.bin\"", "train_path = 5"),
       {},
       "run.toml:15: key 'data.train_path' must be a string"},
      // missing required keys and sections
      {replace(valid(), "max_steps = 10\n", ""), {}, "run.toml: missing required key 'train.max_steps'"},
      {replace(valid(), "train_path = \"t.bin\"\n", ""),
       {},
       "run.toml: missing required key 'data.train_path'"},
      {replace(valid(), "lr = 1e-3\n", ""), {}, "run.toml: missing required key 'optim.lr'"},
      {kModel + kData + kTrain, {}, "run.toml: the config has no [optim] table"},
      // out-of-range values
      {replace(valid(), "batch_size = 4", "batch_size = 0"),
       {},
       "run.toml:17: train.batch_size must be >= 1, got 0"},
      {replace(valid(), "lr = 1e-3", "lr = -1e-3"), {}, "run.toml:22: optim.lr must lie in (0, 1000)"},
      {valid() + "min_lr = 0.1\n", {}, "run.toml:23: optim.min_lr must lie in [0, optim.lr = 0.001]"},
      {valid() + "warmup_steps = 11\n",
       {},
       "run.toml:23: optim.warmup_steps must lie in [0, train.max_steps = 10]"},
      {valid() + "beta2 = 1.0\n", {}, "run.toml:23: optim.beta2 must lie in [0, 1)"},
      {valid() + "grad_clip = -1.0\n", {}, "run.toml:23: optim.grad_clip must be >= 0"},
      {valid() + "[log]\nprogress = \"sometimes\"\n", {}, "run.toml:24: log.progress must be \"auto\""},
      {replace(valid(), "[data]\n", "[data]\nformat = \"u32\"\n"), {}, "run.toml:15: data.format must be"},
      {replace(valid(), "seq_len = 32", "seq_len = -5"), {}, "run.toml:18: train.seq_len must be >= 1"},
      {valid(), {"train.precision=\"fp16\""}, "--set train.precision: train.precision must be \"f32\" or"},
      {valid(), {"train.init=\"xavier\""}, "--set train.init: train.init must be \"normal\" or \"fan_in\""},
      {valid(), {"train.init_std=0.0"}, "--set train.init_std: train.init_std must lie in (0, 1], got 0"},
      {valid(),
       {"train.init=\"fan_in\"", "train.init_scale_residual=true"},
       "--set train.init_scale_residual: train.init_scale_residual applies to train.init = \"normal\""},
      {valid(),
       {"train.init_scale_residual=1"},
       "--set train.init_scale_residual: key 'train.init_scale_residual' must be"},
      // the SPEC's model checks still name file, line and key
      {replace(valid(), "block = 16", "block = 48"), {}, "run.toml:6: model.sparse.block = 48 must divide"},
      // overrides are named as such
      {valid(), {"train.max_steps=0"}, "--set train.max_steps: train.max_steps must be >= 1"},
      {valid(), {"optim.lr=1"}, "--set optim.lr: key 'optim.lr' must be a float, got an integer"},
      {valid(), {"train.nope=1"}, "unknown key 'train.nope'"},
      {valid(), {"optim.lr"}, "is not of the form section.key=value"},
      {valid(), {"foo.bar=1"}, "--set foo.bar: unknown key 'foo'"},
      {valid(),
       {"train.max_steps=1\nx=2"},
       "--set train.max_steps: the value '1\nx=2' is more than one TOML value"},
      // a value where a table belongs would leave its keys at their defaults
      {valid(),
       {"model.sparse=1"},
       "--set model.sparse: key 'model.sparse' must be a table ([model.sparse])"},
      {valid(), {"model.moe=4"}, "--set model.moe: key 'model.moe' must be a table"},
      {valid(), {"train=5"}, "--set train: key 'train' must be a table ([train]), got an integer"},
      // non-finite and far-too-large values
      {valid() + "weight_decay = inf\n", {}, "run.toml:23: optim.weight_decay must be >= 0 and finite"},
      {valid() + "eps = inf\n", {}, "run.toml:23: optim.eps must lie in (0, 1)"},
      {valid(),
       {"train.grad_accum=72057594037927936"},
       "--set train.grad_accum: train.grad_accum must be <= 1048576"},
      {valid(), {"train.batch_size=4611686018427387904"}, "train.batch_size must be <= 1048576"},
      // TOML syntax
      {valid() + "[optim\n", {}, "run.toml:23: TOML syntax error"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK_THAT(error_of(c.text, c.sets), Catch::Contains(c.expected));
  }
}

TEST_CASE("the [lora] section: defaults, resolved form, and errors naming the key", "[train][config][lora]") {
  // Off by default, and then absent from the resolved config (which runs without
  // adapters and their sweep directories keep comparing as before).
  const RunConfig off = RunConfig::from_toml(valid(), "run.toml");
  CHECK_FALSE(off.lora.enabled());
  CHECK(off.to_toml().find("[lora]") == std::string::npos);

  const std::string base = "init_from = \"base.h5\"\n";  // line 21 of the [train] table
  const std::string on = kModel + kData + kTrain + base + kOptim;
  const RunConfig c = RunConfig::from_toml(
      on + "[lora]\nrank = 4\ntargets = [\"layers.*.mixer.out\", \"layers.*.moe.experts.*.up\"]\n",
      "run.toml");
  CHECK(c.lora.rank == 4);
  CHECK(c.lora.alpha == 4.0);  // defaults to rank: a scale of 1
  CHECK(c.lora.targets == std::vector<std::string>{"layers.*.mixer.out", "layers.*.moe.experts.*.up"});
  const std::string text = c.to_toml();
  CHECK(text.find("[lora]\nrank = 4\nalpha = 4.0\ntargets = [\"layers.*.mixer.out\", "
                  "\"layers.*.moe.experts.*.up\"]") != std::string::npos);
  CHECK(RunConfig::from_toml(text, "resolved").to_toml() == text);
  CHECK_FALSE(c.lora.rslora);
  const RunConfig rs = RunConfig::from_toml(
      on + "[lora]\nrank = 4\nrslora = true\ntargets = [\"layers.*.mixer.out\"]\n", "run.toml");
  CHECK(rs.lora.rslora);
  CHECK(rs.lora.scale() == 2.0);  // alpha 4 (the default) / sqrt(4)
  CHECK(rs.to_toml().find("alpha = 4.0\nrslora = true\n") != std::string::npos);
  CHECK(RunConfig::from_toml(rs.to_toml(), "resolved").to_toml() == rs.to_toml());
  CHECK(c.lora.dropout == 0);
  CHECK(text.find("dropout") == std::string::npos);  // absent when 0
  const RunConfig dr = RunConfig::from_toml(
      on + "[lora]\nrank = 4\ndropout = 0.5\ntargets = [\"layers.*.mixer.out\"]\n", "run.toml");
  CHECK(dr.lora.dropout == 0.5);
  CHECK(dr.to_toml().find("alpha = 4.0\ndropout = 0.5\n") != std::string::npos);
  CHECK(RunConfig::from_toml(dr.to_toml(), "resolved").to_toml() == dr.to_toml());

  const std::string lora = on + "[lora]\n";  // keys from line 25
  const std::pair<std::string, std::string> cases[] = {
      {lora + "rank = 4\ntargets = [\"layers.*.mixer.out\"]\nextra = 1\n",
       "run.toml:27: unknown key 'lora.extra'"},
      {lora + "rank = 4.0\n", "run.toml:25: key 'lora.rank' must be an integer, got a float"},
      {lora + "rank = 4\nalpha = 8\n", "run.toml:26: key 'lora.alpha' must be a float, got an integer"},
      {lora + "rank = 4\nrslora = 1\n",
       "run.toml:26: key 'lora.rslora' must be a bool (true or false), got an integer"},
      {lora + "rank = 4\ntargets = \"layers.*.mixer.out\"\n",
       "run.toml:26: key 'lora.targets' must be an array of strings, got a string"},
      {lora + "rank = 4\ntargets = [\"layers.*.mixer.out\", 3]\n",
       "key 'lora.targets' must be an array of strings"},
      {lora + "rank = -1\n", "run.toml:25: lora.rank must lie in [0, 1024]"},
      {lora + "rank = 2000\n", "run.toml:25: lora.rank must lie in [0, 1024]"},
      {lora + "rank = 4\nalpha = 0.0\ntargets = [\"layers.*.mixer.out\"]\n",
       "run.toml:26: lora.alpha must be > 0"},
      {lora + "rank = 4\n", "run.toml: lora.targets is empty"},
      {lora + "dropout = 1.0\n", "run.toml:25: lora.dropout must lie in [0, 1) (0 turns it off), got 1"},
      {lora + "dropout = -0.1\n", "run.toml:25: lora.dropout must lie in [0, 1)"},
      {lora + "dropout = nan\n", "run.toml:25: lora.dropout must lie in [0, 1)"},
      {lora + "dropout = 0\n", "run.toml:25: key 'lora.dropout' must be a float, got an integer"},
      {lora + "rank = 4\ntargets = []\n", "run.toml:26: lora.targets is empty"},
      {lora + "rank = 4\ntargets = [\"layers.*.mixer\"]\n",
       "run.toml:26: lora.targets: pattern \"layers.*.mixer\" matches no layer of this model"},
      {lora + "rank = 4\ntargets = [\"layers.7.mixer.out\"]\n", "matches no layer of this model"},
      {lora + "rank = 4\ntargets = [\"layers.0.memory.query\"]\n", "matches no layer"},  // memory is layer 1
      {lora + "rank = 4\ntargets = [\"layers/0/mixer/out\"]\n", "run.toml:26: lora.targets: pattern"},
      // A typo is caught with the adapters off, too.
      {lora + "targets = [\"layers.*.mixr.out\"]\n",
       "run.toml:25: lora.targets: pattern \"layers.*.mixr.out\""},
      {valid() + "[lora]\nrank = 4\ntargets = [\"layers.*.mixer.out\"]\n",
       "run.toml:24: lora.rank > 0 fine-tunes a trained base model, but train.init_from is empty"},
  };
  for (const auto& [text_case, expected] : cases) {
    INFO(text_case);
    CHECK_THAT(error_of(text_case), Catch::Contains(expected));
  }
  CHECK_THAT(
      error_of(on, {"lora.rank=4", "lora.targets=[\"layers.*.moe.nope\"]"}),
      Catch::Contains("--set lora.targets: lora.targets: pattern \"layers.*.moe.nope\" matches no layer"));
}

TEST_CASE("the shipped configs load and validate", "[train][config]") {
  const std::filesystem::path dir = std::filesystem::path(SHAMN_SOURCE_DIR) / "configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    const RunConfig c = RunConfig::from_file(entry.path().string(), {});
    CHECK(c.train.max_steps >= 1);
    ++loaded;
  }
  CHECK(loaded >= 3);
  const RunConfig d = RunConfig::from_file((dir / "default.toml").string(), {});
  CHECK(d.model.vocab_size == 32000);
  CHECK(d.model.dim == 512);
  CHECK(d.model.n_layers == 8);
  CHECK(d.model.moe().experts() == 16);
  CHECK(d.model.moe().k == 2);
  CHECK(d.train.batch_size == 96);
  CHECK(d.train.seq_len == 512);
  CHECK(d.optim.lr == 3e-4);
  CHECK(d.model.sparsity == 0.9);
}
