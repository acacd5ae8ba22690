#pragma once
// The tiny models the runtime tests share: a random SHAMN model with every
// kind of layer, saved as a checkpoint in a temporary directory and exported
// to an in-memory .shq at any precision.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "core/rng.h"
#include "infer/export_model.h"
#include "infer/infer_model.h"
#include "layers/shamn_model.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"

namespace shamn::test {

// Block 32 by default (quantisation blocks line up with sparse blocks), a
// memory layer, two groups of experts; `extra` appends or overrides tables.
inline std::string model_toml(const std::string& extra = "", int64_t block = 32) {
  return R"([model]
vocab_size = 300
dim = 64
n_layers = 2
[model.embed]
buckets = 40
)" + extra +
         R"(
[model.sparse]
block = )" +
         std::to_string(block) +
         R"(
sparsity = 0.5
[model.memory]
size = 64
topk = 4
key_dim = 24
[model.moe]
groups = 2
experts_per_group = 2
k = 2
)";
}

struct TestModel {
  std::string dir, checkpoint;
  ModelConfig config;
  std::unique_ptr<Shamn> reference;

  // `name` must be unique among the models alive at once; `seed` initialises the weights.
  // bias_width > 0 draws every bias from U(-bias_width, bias_width) where init
  // leaves zeros, for tests of the products' bias paths (a random model's
  // routing flips with them, so the quantisation tests keep zeros).
  explicit TestModel(const std::string& toml, const std::string& name, uint64_t seed = 5,
                     double bias_width = 0.0) {
    dir = (test::scratch_root() / ("infer_" + name)).string();
    std::filesystem::create_directories(dir);
    checkpoint = dir + "/model.h5";
    config = ModelConfig::from_toml(toml, name);
    reference = std::make_unique<Shamn>(config);
    // fan_in: its residual branches start large, so random models of different
    // seeds and depths disagree (under the normal scheme the branches start
    // small and untrained models of different seeds greedily pick the same tokens).
    reference->init(seed, WeightInit{InitScheme::fan_in});
    // Larger gains and importance than init so the logits are far from flat.
    for (const NamedVar& p : reference->named_parameters()) {
      Tensor v = p.var.value();
      if (p.name.find("gain") != std::string::npos || p.name.find("importance") != std::string::npos) {
        Rng rng(seed + 2, std::hash<std::string>{}(p.name));  // seed 5: the gains the tests were written with
        rng.fill_uniform(v, 0.5, 3.0);
      } else if (bias_width > 0 && p.name.ends_with(".bias")) {
        Rng rng(seed + 3, std::hash<std::string>{}(p.name));
        rng.fill_uniform(v, -bias_width, bias_width);
      }
    }
    save_model_checkpoint(checkpoint, *reference, config.to_toml(), 42);
  }
  ~TestModel() { std::filesystem::remove_all(dir); }

  // tokenizer_text: a tokenizer file's text to embed ("" = none).
  InferModel runtime(ShqQuant quant, const std::string& tokenizer_text = "") const {
    ExportOptions o;
    o.quant = quant;
    o.tokenizer_text = tokenizer_text;
    const std::vector<uint8_t> image = export_model_image(checkpoint, o);
    return InferModel(ShqFile::from_bytes(image.data(), image.size(), "test"));
  }
};

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return t;
}

}  // namespace shamn::test
