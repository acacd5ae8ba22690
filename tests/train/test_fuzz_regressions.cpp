// Inputs that the run config, sweep file and checkpoint fuzz targets
// (tests/fuzz/), or a review of what they parse, found to crash, overflow or
// allocate without bound before the fix. Each must now be a clean InputError
// naming the file, key or dataset. The files live in
// tests/fuzz/regressions/<target>/ in the fuzz targets' input format, so that
// tests/fuzz/ci_smoke.sh also replays them under the sanitizers; every file
// there must be listed here.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/hdf5_file.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "sweep/sweep_spec.h"
#include "tests/fuzz/checkpoint_model.h"
#include "tests/fuzz/regression_files.h"
#include "tests/fuzz/sweep_base.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"
#include "train/run_config.h"
#include "train/train_checkpoint.h"

namespace shamn {

using test::fuzz_regressions;
using test::Regression;
using test::require_all_listed;

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The run config and sweep targets' input: a document, then after a line "%%"
// one --set override per line (tests/fuzz/fuzz_scratch.h).
struct Split {
  std::string document;
  std::vector<std::string> overrides;
};

Split split(const std::string& text) {
  Split out;
  const size_t mark = text.rfind("%%\n", 0) == 0 ? 0 : text.find("\n%%\n");
  if (mark == std::string::npos) {
    out.document = text;
    return out;
  }
  out.document = text.substr(0, mark == 0 ? 0 : mark + 1);
  std::istringstream rest(text.substr(mark == 0 ? 3 : mark + 4));
  for (std::string line; std::getline(rest, line);)
    if (!line.empty()) out.overrides.push_back(line);
  return out;
}

fs::path scratch(const std::string& name) { return test::scratch_dir("fuzz_regressions_" + name); }

}  // namespace

TEST_CASE("run configs that once overflowed are clean InputErrors", "[fuzz][config]") {
  const std::vector<Regression> cases = {
      // memory.size = -3: sqrt gave NaN, llround INT64_MIN, and n * n overflowed.
      {"negative_memory_size.toml", "model.memory.size must be a perfect square"},
      // experts_per_group = INT64_MAX: groups * experts_per_group overflowed
      // where the LoRA targets listed the experts (fuzz smoke, stop 39).
      {"huge_experts_per_group.toml", "model.moe.groups * model.moe.experts_per_group must be at most 65536"},
  };
  require_all_listed("run_config", cases);
  const fs::path dir = scratch("run_config");
  for (const Regression& c : cases) {
    INFO(c.file);
    // As the fuzz target loads it: the whole run config with its overrides, and
    // the [model] tables alone (a checkpoint's config attribute).
    const Split input = split(read_all(fuzz_regressions("run_config") / c.file));
    const std::string path = (dir / "run.toml").string();
    std::ofstream(path, std::ios::binary) << input.document;
    CHECK_THROWS_AS(RunConfig::from_file(path, input.overrides), InputError);
    CHECK_THROWS_WITH(ModelConfig::from_toml(input.document, "doc"),
                      Catch::Contains("doc:") && Catch::Contains(c.needle));
  }
}

TEST_CASE("model configs near the int64 limits are refused without overflow", "[fuzz][config]") {
  const std::string head = "[model]\nvocab_size = 64\ndim = 64\nn_layers = 2\n";
  struct Case {
    std::string body, needle;
  };
  const std::vector<Case> cases = {
      {"[model.memory]\nsize = 9223372036854775807\n", "model.memory.size must be a perfect square"},
      {"[model.memory]\nsize = -9223372036854775808\n", "model.memory.size must be a perfect square"},
      {"[model.moe]\ngroups = 9223372036854775807\ngroup_k = 9223372036854775807\n"
       "experts_per_group = 9223372036854775807\nk = -1\n",
       "group_k * experts_per_group = 9223372036854775807"},
      {"[model.embed]\nsparsity = nan\n", "model.embed.sparsity must lie in [0, 1)"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    CHECK_THROWS_WITH(ModelConfig::from_toml(head + c.body, "cfg"), Catch::Contains(c.needle));
  }
  // Sizes far past any model are named by their key, before any product of them is formed.
  const std::vector<Case> too_large = {
      {"[model.memory]\nsize = 9223372030926249001\ntopk = 1\n", "model.memory.size must be <= 67108864"},
      {"[model.memory]\nkey_dim = 100000000\n", "model.memory.key_dim must be <= 16384"},
      {"[model.mixer]\nkernel = 4611686018427387904\n", "model.mixer.kernel must be <= 4096"},
      {"[model.embed]\nhashes = 4611686018427387904\n", "model.embed.hashes must be <= 64"},
      {"[model.embed]\nbuckets = 4611686018427387904\n", "model.embed.buckets must be <= 67108864"},
      {"[model.moe]\nhidden = 4611686018427387904\n", "model.moe.hidden must be <= 262144"},
      {"[model.moe]\naux_coef = inf\n", "model.moe.aux_coef must be >= 0 and finite"},
  };
  for (const Case& c : too_large) {
    INFO(c.body);
    CHECK_THROWS_WITH(ModelConfig::from_toml(head + c.body, "cfg"), Catch::Contains(c.needle));
  }
  for (const auto& [key, needle] : std::vector<std::pair<std::string, std::string>>{
           {"vocab_size", "model.vocab_size must be <= 16777216"},
           {"dim", "model.dim must be <= 65536"},
           {"n_layers", "model.n_layers must be <= 1024"}}) {
    std::string doc = "[model]\nvocab_size = 64\ndim = 64\nn_layers = 2\n";
    const size_t at = doc.find(key + " = ");
    doc.replace(at, doc.find('\n', at) - at, key + " = 4611686018427387904");
    CHECK_THROWS_WITH(ModelConfig::from_toml(doc, "cfg"), Catch::Contains(needle));
  }
  // The largest perfect square below 2^63 is one, without overflow.
  MemoryOptions memory;
  memory.size = 9223372030926249001;
  CHECK(memory.sqrt_size() == 3037000499);
  // A vocabulary near 2^63 with no bucket count: the derived count saturates, no UB.
  ModelConfig huge;
  huge.vocab_size = 9223372036854775807;
  huge.embed_sparsity = 0.0;
  CHECK(huge.embed().buckets == 9223372036854775807);
}

TEST_CASE("checkpoints that once exhausted memory are clean InputErrors", "[fuzz][checkpoint]") {
  const std::vector<Regression> cases = {
      // An optimizer moment of shape [2^20, 2^20] that was never written (5 KB
      // file): reading it allocated 4 TiB before any shape was checked.
      {"unwritten_2e40_moment.h5",
       "dataset '/optim/m/embed/table' has a dimension of 1048576 that makes it larger than the whole file"},
  };
  require_all_listed("checkpoint", cases);
  Shamn model(ModelConfig::from_toml(fuzz::kCheckpointModelToml, "fuzz"));
  AdamW optimizer(split_weight_decay(model.named_parameters(), 0.1));
  for (const Regression& c : cases) {
    const std::string path = (fuzz_regressions("checkpoint") / c.file).string();
    INFO(path);
    CHECK_THROWS_AS(load_train_checkpoint(path, model, optimizer), InputError);
    CHECK_THROWS_WITH(load_train_checkpoint(path, model, optimizer),
                      Catch::Contains(path) && Catch::Contains(c.needle));
  }
}

TEST_CASE("sweep files that once threw or overflowed now fail cleanly", "[fuzz][sweep]") {
  const std::vector<Regression> cases = {
      // sweep.base names a file whose name is longer than the OS allows
      // (ENAMETOOLONG): std::filesystem_error escaped expand_sweep.
      {"base_name_too_long.toml", "the base config"},
      // model.dim = 2^50 with blocks of 1: the duplicate-point key multiplied
      // the MoE's active blocks by 10^6 and overflowed. model.dim's bound now
      // refuses it, naming the key, before any product is formed.
      {"huge_dim_moe_key.toml", "model.dim must be <= 65536"},
  };
  require_all_listed("sweep_spec", cases);
  const fs::path dir = scratch("sweep_spec");
  std::ofstream(dir / "base.toml") << fuzz::sweep_base_toml();
  for (const Regression& c : cases) {
    INFO(c.file);
    const Split input = split(read_all(fuzz_regressions("sweep_spec") / c.file));
    const std::string path = (dir / "sweep.toml").string();
    std::ofstream(path, std::ios::binary) << input.document;
    CHECK_THROWS_WITH(expand_sweep(SweepSpec::from_file(path), input.overrides),
                      Catch::Contains(path) && Catch::Contains(c.needle));
  }
}

TEST_CASE("a sweep of more than kMaxSweepPoints points is refused at parse time", "[fuzz][sweep]") {
  const fs::path dir = scratch("sweep_limit");
  const std::string head = "[sweep]\nbase = \"base.toml\"\nout_dir = \"o\"\n";
  std::string values;
  for (int i = 0; i < 101; ++i) values += (i ? ", " : "") + std::to_string(i);
  const std::string path = (dir / "sweep.toml").string();
  // 101 x 101 = 10201 > 10000: the second axis crosses the limit.
  std::ofstream(path) << head << "[sweep.axes]\ntrain.batch_size = [" << values << "]\ntrain.seq_len = ["
                      << values << "]\n";
  CHECK_THROWS_WITH(SweepSpec::from_file(path), Catch::Contains(path) &&
                                                    Catch::Contains("sweep.axes.train.seq_len") &&
                                                    Catch::Contains("more than 10000 points"));
  // 100 x 100 is allowed, and counted.
  values = values.substr(0, values.rfind(','));
  std::ofstream(path) << head << "[sweep.axes]\ntrain.batch_size = [" << values << "]\ntrain.seq_len = ["
                      << values << "]\n";
  CHECK(sweep_point_count(SweepSpec::from_file(path)) == 10000);
  std::ofstream(path) << head << "seeds = [1, 2, 3]\n";
  CHECK(sweep_point_count(SweepSpec::from_file(path)) == 3);
}

}  // namespace shamn
