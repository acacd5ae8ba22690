// shamn analyze on models built so the answer is known: routers that tie send
// every token to the lowest experts, memory keys that make one slot win,
// bucket indices that collide on purpose, blocks of known norms.
#include <cmath>

#include "helpers.h"
#include "train/analysis_fixture.h"
#include "train/model_analysis.h"

using namespace shamn;
using namespace shamn::test;

using Fixture = AnalysisFixture;

TEST_CASE("analyze: routers that tie send every token to experts 0 and 1", "[analysis]") {
  Fixture f;
  tie_routers(f.model);
  const TokenFile data(f.data);
  const ModelAnalysis a = analyze_model(f.model, data, 3, 32);
  REQUIRE(a.windows == 3);
  REQUIRE(a.tokens == 96);
  REQUIRE(a.moe.size() == 2);
  for (const MoeLayerStats& s : a.moe) {
    CHECK(s.tokens == 96);
    CHECK(s.expert_share == std::vector<double>{0.5, 0.5, 0, 0});
    CHECK(s.group_share == std::vector<double>{1, 0});
    CHECK(s.never_chosen == 2);
    CHECK(s.busiest_expert == 0);
    CHECK(s.busiest_share == 0.5);
    CHECK(s.entropy == Approx(std::log(2.0)));
    CHECK(s.max_entropy == Approx(std::log(4.0)));
    CHECK(s.mean_gate_first == Approx(0.5));
    CHECK(s.mean_gate_second == Approx(0.5));
  }
}

TEST_CASE("analyze: a trained-looking router spreads its load", "[analysis]") {
  Fixture f;  // random init: near-uniform routing, every expert used
  const TokenFile data(f.data);
  const ModelAnalysis a = analyze_model(f.model, data, 4, 64);
  for (const MoeLayerStats& s : a.moe) {
    CHECK(s.never_chosen == 0);
    CHECK(s.entropy > 0.9 * s.max_entropy);
    CHECK(s.mean_gate_first >= s.mean_gate_second);
    CHECK(s.mean_gate_first + s.mean_gate_second == Approx(1.0));
  }
}

TEST_CASE("analyze: memory keys that make slot 0 win", "[analysis]") {
  Fixture f;
  memory_prefers_slot_0(f.model);
  const TokenFile data(f.data);
  const ModelAnalysis a = analyze_model(f.model, data, 2, 32);
  REQUIRE(a.memory.size() == 1);
  const MemoryLayerStats& m = a.memory[0];
  CHECK(m.layer == 1);
  CHECK(m.slots == 16);
  CHECK(m.reads == 64 * 2);
  CHECK(m.slots_read == 2);
  CHECK(m.slot_reads[0] == 64);
  CHECK(m.slot_reads[1] == 64);
  CHECK(m.top1pct_share == Approx(0.5));  // ceil(16 / 100) = 1 slot
  CHECK(m.entropy == Approx(std::log(2.0)));
  CHECK(m.mean_margin == Approx(5.0).epsilon(1e-4));
}

TEST_CASE("analyze: bucket indices that collide in every hash", "[analysis]") {
  Fixture f;
  // Token t in bucket t % 16 in both hashes: the 4 tokens of each residue share
  // every bucket, 16 * C(4, 2) = 96 of the C(64, 2) = 2016 pairs.
  Tensor idx = f.model.embed().bucket_index();
  for (int64_t t = 0; t < 64; ++t)
    for (int64_t j = 0; j < 2; ++j) idx.data<int32_t>()[t * 2 + j] = static_cast<int32_t>(t % 16);
  const EmbeddingStats e = embedding_stats(idx, 16);
  CHECK(e.tokens_per_bucket_mean == 8.0);
  CHECK(e.tokens_per_bucket_max == 8);
  CHECK(e.empty_buckets == 0);
  CHECK(e.colliding_pairs == 96);
  CHECK(e.colliding_pair_share == Approx(96.0 / 2016.0));
  // Two hashes swapped are the same buckets to the embedding's sum.
  idx.data<int32_t>()[0] = 5;
  idx.data<int32_t>()[1] = 9;
  idx.data<int32_t>()[2] = 9;
  idx.data<int32_t>()[3] = 5;
  CHECK(embedding_stats(idx, 16).colliding_pairs == 96 - 3 - 3 + 1);
}

TEST_CASE("analyze: loss by frequency thirds", "[analysis]") {
  // Types 1..6 occur 1..6 times (0 never): rare {1, 2}, middle {3, 4}, frequent {5, 6}.
  const std::vector<int64_t> counts = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> targets = {1, 2, 3, 6, 6, 5};
  const std::vector<double> losses = {4, 6, 3, 1, 2, 3};
  const std::vector<FrequencyThird> t = frequency_thirds(counts, losses, targets);
  REQUIRE(t.size() == 3);
  CHECK(t[0].types == 2);
  CHECK(t[0].min_count == 1);
  CHECK(t[0].max_count == 2);
  CHECK(t[0].targets == 2);
  CHECK(t[0].loss == 5.0);
  CHECK(t[1].targets == 1);
  CHECK(t[1].loss == 3.0);
  CHECK(t[2].targets == 3);
  CHECK(t[2].loss == 2.0);
  CHECK(t[2].max_count == 6);

  // On a model: the thirds' losses, weighted by their targets, are the whole loss.
  Fixture f;
  const TokenFile data(f.data);
  const ModelAnalysis a = analyze_model(f.model, data, 4, 50);
  double sum = 0;
  int64_t n = 0;
  for (const FrequencyThird& x : a.thirds) {
    n += x.targets;
    if (x.targets > 0) sum += x.loss * static_cast<double>(x.targets);
  }
  CHECK(n == a.tokens);
  CHECK(sum / static_cast<double>(n) == Approx(a.loss).epsilon(1e-12));
}

TEST_CASE("analyze: block norms of known blocks", "[analysis]") {
  Fixture f;
  // Every value 1 in layer 0's mixer output: each 8 x 8 block has norm 8; one doubled: 16.
  Tensor v = param(f.model, "layers.0.mixer.out.values");
  fill(v, 1);
  for (int64_t i = 0; i < 64; ++i) v.data<float>()[i] = 2;
  const int64_t blocks = v.shape()[0] * v.shape()[1];
  for (const BlockNormStats& b : block_norm_stats(f.model)) {
    if (b.name != "layers.0.mixer.out") continue;
    CHECK(b.blocks == blocks);
    CHECK(b.min == 8.0);
    CHECK(b.max == 16.0);
    REQUIRE(blocks >= 2);
    CHECK(b.median == (blocks == 2 ? 12.0 : 8.0));  // of {8, ..., 8, 16}
    const double mean = (16.0 + 8.0 * static_cast<double>(blocks - 1)) / static_cast<double>(blocks);
    const double var =
        ((16.0 - mean) * (16.0 - mean) + static_cast<double>(blocks - 1) * (8.0 - mean) * (8.0 - mean)) /
        static_cast<double>(blocks);
    CHECK(b.cv == Approx(std::sqrt(var) / mean));
    return;
  }
  FAIL("no layers.0.mixer.out in the block-norm table");
}
