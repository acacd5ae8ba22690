// shamn analyze on model files: a .shq exported from a model built so the
// answer is known gives that answer, in f32 and int8, and a checkpoint and its
// f32 export agree on every table.
#include <cmath>

#include "cli/shq_analysis.h"
#include "helpers.h"
#include "infer/export_model.h"
#include "train/analysis_fixture.h"
#include "train/model_checkpoint.h"

using namespace shamn;
using namespace shamn::test;

namespace {

// The fixture's model saved as a checkpoint and exported under `quant`.
InferModel exported(const AnalysisFixture& f, ShqQuant quant) {
  const std::string ckpt = (f.dir / "model.h5").string(), shq = (f.dir / "model.shq").string();
  save_model_checkpoint(ckpt, f.model, f.config.to_toml(), 0);
  ExportOptions o;
  o.quant = quant;
  export_model(ckpt, o, shq);
  return InferModel(ShqFile::open(shq));
}

}  // namespace

TEST_CASE("analyze .shq: tied routers and a winning memory slot, f32 and int8", "[analysis]") {
  AnalysisFixture f;
  tie_routers(f.model);
  memory_prefers_slot_0(f.model);
  for (ShqQuant quant : {ShqQuant::f32, ShqQuant::int8}) {
    INFO("quant " << static_cast<int>(quant));
    const InferModel model = exported(f, quant);
    const TokenFile data(f.data);
    const ModelAnalysis a = analyze_shq(model, data, 3, 32);
    REQUIRE(a.tokens == 96);
    REQUIRE(a.moe.size() == 2);
    for (const MoeLayerStats& s : a.moe) {
      CHECK(s.expert_share == std::vector<double>{0.5, 0.5, 0, 0});
      CHECK(s.group_share == std::vector<double>{1, 0});
      CHECK(s.never_chosen == 2);
      CHECK(s.mean_gate_first == Approx(0.5));
      CHECK(s.mean_gate_second == Approx(0.5));
    }
    REQUIRE(a.memory.size() == 1);
    const MemoryLayerStats& m = a.memory[0];
    CHECK(m.layer == 1);
    CHECK(m.slots_read == 2);
    CHECK(m.slot_reads[0] == 96);
    CHECK(m.slot_reads[1] == 96);
    CHECK(m.top1pct_share == Approx(0.5));
    CHECK(m.mean_margin == Approx(5.0).epsilon(1e-3));
    CHECK(a.embed.vocab == 64);
    CHECK(a.embed.hashes == 2);
    int64_t targets = 0;
    for (const FrequencyThird& t : a.thirds) targets += t.targets;
    CHECK(targets == 96);
  }
}

TEST_CASE("analyze .shq: a checkpoint and its f32 export give the same tables", "[analysis]") {
  AnalysisFixture f;  // random init: every expert and many slots in use
  const InferModel model = exported(f, ShqQuant::f32);
  const TokenFile data(f.data);
  const ModelAnalysis c = analyze_model(f.model, data, 4, 64);
  const ModelAnalysis s = analyze_shq(model, data, 4, 64);
  CHECK(s.loss == Approx(c.loss).epsilon(1e-5));
  REQUIRE(s.moe.size() == c.moe.size());
  for (size_t l = 0; l < c.moe.size(); ++l) {
    CHECK(s.moe[l].never_chosen == 0);
    CHECK(s.moe[l].expert_share == c.moe[l].expert_share);
    CHECK(s.moe[l].mean_gate_first == Approx(c.moe[l].mean_gate_first).epsilon(1e-5));
  }
  REQUIRE(s.memory.size() == 1);
  CHECK(s.memory[0].slot_reads == c.memory[0].slot_reads);
  CHECK(s.memory[0].slots_read > 2);
  CHECK(s.memory[0].mean_margin == Approx(c.memory[0].mean_margin).epsilon(1e-4));
  CHECK(s.embed.colliding_pairs == c.embed.colliding_pairs);
  CHECK(s.embed.tokens_per_bucket_max == c.embed.tokens_per_bucket_max);
  for (size_t i = 0; i < 3; ++i) CHECK(s.thirds[i].targets == c.thirds[i].targets);
  // Dequantised f32 blocks are the checkpoint's: the same rows, bit for bit.
  REQUIRE(s.block_sparse.size() == c.block_sparse.size());
  for (size_t i = 0; i < c.block_sparse.size(); ++i) {
    CHECK(s.block_sparse[i].name == c.block_sparse[i].name);
    CHECK(s.block_sparse[i].blocks == c.block_sparse[i].blocks);
    CHECK(s.block_sparse[i].median == c.block_sparse[i].median);
    CHECK(s.block_sparse[i].cv == Approx(c.block_sparse[i].cv).epsilon(1e-12));
  }
}

TEST_CASE("analyze .shq: int8 block norms are the checkpoint's within quantisation error", "[analysis]") {
  AnalysisFixture f;
  const InferModel model = exported(f, ShqQuant::int8);
  const std::vector<BlockNormStats> c = block_norm_stats(f.model), s = shq_block_norm_stats(model);
  REQUIRE(s.size() == c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    CHECK(s[i].name == c[i].name);
    CHECK(s[i].max == Approx(c[i].max).epsilon(0.02));
    CHECK(s[i].median == Approx(c[i].median).epsilon(0.02));
  }
}
