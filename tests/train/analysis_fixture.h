#pragma once
// A small SHAMN model (two layers, memory in layer 1, four experts, k = 2)
// and a token file, for `shamn analyze` tests on checkpoints and model files;
// and the weights that make the answer known.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "core/config_table.h"
#include "data/token_file.h"
#include "layers/shamn_model.h"
#include "tests/scratch_dir.h"

namespace shamn::test {

inline constexpr const char* kAnalysisToml = R"([model]
vocab_size = 64
dim = 16
n_layers = 2
[model.embed]
buckets = 16
[model.sparse]
block = 8
sparsity = 0.5
[model.memory]
size = 16
topk = 2
layers = [1]
[model.moe]
groups = 2
experts_per_group = 2
k = 2
)";

inline Tensor param(const Shamn& m, const std::string& name) {
  for (const NamedVar& p : m.named_parameters())
    if (p.name == name) return p.var.value();  // shares the storage: writes reach the model
  FAIL("no parameter " << name);
  return {};
}

inline void fill(Tensor t, float v) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
}

// All-zero router weights: uniform probabilities, and ties go to the lower
// index (SPEC 1.6): group 0, then its experts 0 and 1, gates 1/2 each.
inline void tie_routers(const Shamn& m) {
  for (int l = 0; l < 2; ++l) {
    fill(param(m, "layers." + std::to_string(l) + ".moe.router_group.weight"), 0);
    fill(param(m, "layers." + std::to_string(l) + ".moe.router_expert.weight"), 0);
  }
}

// A constant query (weight 0, bias 1) and one key per half that scores 5
// against it, the others 0: slot 0 = (0, 0) scores 10, slots 1 = (0, 1) and
// 4 = (1, 0) score 5, and of those the lower id comes second.
inline void memory_prefers_slot_0(const Shamn& m) {
  fill(param(m, "layers.1.memory.query.weight"), 0);
  fill(param(m, "layers.1.memory.query.bias"), 1);
  for (const char* keys : {"layers.1.memory.keys1", "layers.1.memory.keys2"}) {
    Tensor k = param(m, keys);
    fill(k, 0);
    const int64_t dh = k.shape()[1];
    for (int64_t j = 0; j < dh; ++j) k.data<float>()[j] = 5.0f / static_cast<float>(dh);
  }
}

struct AnalysisFixture {
  ModelConfig config = ModelConfig::from_table(ConfigTable::parse(kAnalysisToml, "test"));
  Shamn model{config};
  std::filesystem::path dir = test::scratch_root() / "analysis";
  std::string data = (dir / "tokens.bin").string();
  AnalysisFixture() {
    std::filesystem::create_directories(dir);
    model.init(3);
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 2000; ++i) tokens.push_back((i * 7 + i / 13) % 64);
    write_token_file(data, tokens);
  }
  ~AnalysisFixture() { std::filesystem::remove_all(dir); }
};

}  // namespace shamn::test
