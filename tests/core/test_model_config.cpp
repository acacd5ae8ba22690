// SPEC section 5: defaults, resolution, and a table of bad configs each giving a
// message that names the key and the line.
#include <catch2/catch.hpp>

#include "core/check.h"
#include "core/config_table.h"
#include "core/model_config.h"

using namespace shamn;

namespace {
const char* kMinimal = "[model]\nvocab_size = 32000\ndim = 512\nn_layers = 8\n";
}

TEST_CASE("model config defaults follow SPEC section 5", "[core][config]") {
  const ModelConfig c = ModelConfig::from_toml(kMinimal, "minimal.toml");
  CHECK(c.embed().buckets == 1600);
  CHECK(c.embed().hashes == 2);
  CHECK(c.embed().tie_head);
  CHECK(c.block == 32);
  CHECK(c.mixer().kernel == 4);
  CHECK(c.mixer().out.sparsity == 0.9);
  CHECK(c.mixer().out.active_blocks() == 2);  // round(0.1 * 16) = 2
  CHECK(c.resolved_memory_layers() == std::vector<int64_t>{4});
  CHECK(c.memory().size == 65536);
  CHECK(c.memory().sqrt_size() == 256);
  CHECK(c.memory().topk == 32);
  CHECK(c.memory().key_dim == 256);
  CHECK(c.moe().experts() == 16);
  CHECK(c.moe().hidden == 512);
  CHECK(c.moe().k == 2);
  CHECK(c.moe().group_k == 1);
  CHECK(c.moe().aux_coef == 0.01);
}

TEST_CASE("key_dim default is D/2 rounded down to even, sparsity overrides", "[core][config]") {
  const ModelConfig c = ModelConfig::from_toml(
      "[model]\nvocab_size = 100\ndim = 96\nn_layers = 3\n[model.sparse]\nblock = 16\n"
      "[model.memory]\nsize = 64\ntopk = 4\n[model.mixer]\nsparsity = 0.5\n[model.moe]\n"
      "sparsity = 0.75\n[model.embed]\nbuckets = 33\n",
      "x.toml");
  CHECK(c.memory().key_dim == 48);
  CHECK(ModelConfig::from_toml("[model]\nvocab_size = 100\ndim = 100\nn_layers = 1\n"
                               "[model.sparse]\nblock = 4\n[model.memory]\nsize = 16\ntopk = 2\n",
                               "y.toml")
            .memory()
            .key_dim == 50);
  CHECK(ModelConfig::from_toml("[model]\nvocab_size = 100\ndim = 108\nn_layers = 1\n"
                               "[model.sparse]\nblock = 4\n[model.memory]\nsize = 16\ntopk = 2\n",
                               "y.toml")
            .memory()
            .key_dim == 54);
  CHECK(c.mixer().out.active_blocks() == 3);  // round(0.5 * 6)
  CHECK(c.moe().up.active_blocks() == 2);     // round(0.25 * 6) = round(1.5) = 2
  CHECK(c.embed().buckets == 33);
  CHECK(c.resolved_memory_layers() == std::vector<int64_t>{1});
}

TEST_CASE("resolved TOML round-trips to the same model", "[core][config]") {
  const ModelConfig c = ModelConfig::from_toml(kMinimal, "minimal.toml");
  const ModelConfig d = ModelConfig::from_toml(c.to_toml(), "resolved");
  CHECK(d.to_toml() == c.to_toml());
  CHECK(d.embed().buckets == 1600);
  CHECK(*d.memory_key_dim == 256);
}

TEST_CASE("bad model configs name the file, line and key", "[core][config]") {
  struct Case {
    const char* extra;
    const char* expected;
  };
  const Case cases[] = {
      {"[model.sparse]\nblock = 48\n", "bad.toml:7: model.sparse.block = 48 must divide"},
      {"[model.memory]\nsize = 1000\n", "bad.toml:7: model.memory.size must be a perfect square"},
      {"[model.moe]\nk = 5\n", "bad.toml:7: model.moe.k must lie in [1, group_k * experts_per_group = 4]"},
      {"[model.moe]\ngroup_k = 9\n", "bad.toml:7: model.moe.group_k"},
      {"[model.memory]\ntopk = 300\n", "bad.toml:7: model.memory.topk must lie in [1, 256]"},
      {"[model.memory]\nkey_dim = 7\n", "model.memory.key_dim must be even"},
      // A default derived from another key: the error names the key the user wrote.
      {"[model.embed]\nsparsity = 0.99999999\n",
       "bad.toml:7: model.embed.sparsity leaves round(model.vocab_size 32000 x (1 - sparsity)) = 0 hash "
       "buckets"},
      {"[model.memory]\nlayers = [8]\n", "bad.toml:7: model.memory.layers entry 8"},
      // Checked with no memory layer too: the values go into every checkpoint.
      {"[model.memory]\nlayers = []\nsize = 1000\n", "bad.toml:8: model.memory.size"},
      {"[model.sparse]\nsparsity = 1.0\n", "bad.toml:7: model.sparse.sparsity must lie in [0, 1)"},
      {"[model.mixer]\nsparsity = -0.1\n", "bad.toml:7: model.mixer.sparsity must lie in [0, 1)"},
      {"[model.sparse]\nsparsity = 0\n",
       "bad.toml:7: key 'model.sparse.sparsity' must be a float, got an integer"},
      {"[model.sparse]\nblock = 32.0\n",
       "bad.toml:7: key 'model.sparse.block' must be an integer, got a float"},
      {"[model.embed]\ntie_head = 1\n", "bad.toml:7: key 'model.embed.tie_head' must be a bool"},
      {"[model.moe]\nexperts = 4\n", "bad.toml:7: unknown key 'model.moe.experts'"},
      // A quoted key with a dot is one key of its table, read by no one.
      {"[model.moe]\n\"group.k\" = 1\n", "bad.toml:7: key \"group.k\" is quoted with a dot in it"},
      {"[model.memory]\nlayers = 4\n", "key 'model.memory.layers' must be an array of integers"},
      {"[model\n", "bad.toml:6: TOML syntax error"},
  };
  for (const Case& c : cases) {
    INFO(c.extra);
    const std::string text = std::string(kMinimal) + "\n" + c.extra;
    CHECK_THROWS_WITH(ModelConfig::from_toml(text, "bad.toml"), Catch::Contains(c.expected));
    CHECK_THROWS_AS(ModelConfig::from_toml(text, "bad.toml"), InputError);
  }
  CHECK_THROWS_WITH(
      ModelConfig::from_toml("[model]\nvocab_size = 64\ndim = 2\nn_layers = 1\n[model.sparse]\nblock = 2\n",
                             "m.toml"),
      Catch::Contains("m.toml:3: model.memory.key_dim defaults to model.dim / 2 (even), 0 here"));
  CHECK_THROWS_WITH(ModelConfig::from_toml("[model]\ndim = 8\nn_layers = 1\n", "m.toml"),
                    Catch::Contains("missing required key 'model.vocab_size'"));
  CHECK_THROWS_WITH(ModelConfig::from_toml("[train]\nx = 1\n", "m.toml"),
                    Catch::Contains("no [model] table"));
}

TEST_CASE("config overrides (--set) replace or add keys", "[core][config]") {
  ConfigTable t = ConfigTable::parse(kMinimal, "base.toml");
  t.set_from_text("model.sparse.sparsity=0.5");
  t.set_from_text("model.dim = 256");
  const ModelConfig c = ModelConfig::from_table(t);
  CHECK(c.sparsity == 0.5);
  CHECK(c.dim == 256);
  CHECK_THROWS_WITH(t.set_from_text("model.dim"), Catch::Contains("section.key=value"));
  CHECK_THROWS_WITH(t.set_from_text("model.name=abc"), Catch::Contains("not valid TOML"));
}

TEST_CASE("config tables list children and leaves in file order, with TOML literals", "[core][config]") {
  const ConfigTable t = ConfigTable::parse(
      "top = 1\n[s]\nz = 2\n[s.set]\nmodel.dim = 64\n\"train.lr\" = 0.1\n[s.set.optim]\nwd = 1e-5\n"
      "[s.axes]\nb = [1.0, 0.5]\nc = [1, \"x\"]\nd = []\n",
      "sweep.toml");
  CHECK(t.children("") == std::vector<std::string>{"top", "s"});
  CHECK(t.children("s") == std::vector<std::string>{"z", "set", "axes"});
  CHECK(t.children("nowhere").empty());
  CHECK_THROWS_WITH(t.children("top"), Catch::Contains("sweep.toml:1: key 'top' must be a table"));

  const std::vector<ConfigTable::Leaf> set = t.leaves("s.set");
  REQUIRE(set.size() == 3);
  // Nested tables and a quoted dotted key alike; floats keep a decimal point.
  CHECK(set[0].key == "model.dim");
  CHECK(set[0].literal == "64");
  CHECK(set[0].where == "sweep.toml:5");
  CHECK(set[1].key == "train.lr");
  CHECK(set[1].literal == "0.1");
  CHECK(set[2].key == "optim.wd");
  CHECK(set[2].literal == "1e-05");
  CHECK(!set[0].is_array);

  const std::vector<ConfigTable::Leaf> axes = t.leaves("s.axes");
  REQUIRE(axes.size() == 3);
  CHECK(axes[0].is_array);
  CHECK(axes[0].elements == std::vector<std::string>{"1.0", "0.5"});
  CHECK(!axes[0].mixed_types);
  CHECK(axes[1].mixed_types);
  CHECK(axes[1].elements == std::vector<std::string>{"1", "'x'"});
  CHECK(axes[2].is_array);
  CHECK(axes[2].elements.empty());
  CHECK(!axes[2].mixed_types);
  CHECK(t.leaves("s.nowhere").empty());
  CHECK_THROWS_WITH(t.leaves("s.z"), Catch::Contains("key 's.z' must be a table"));
}
