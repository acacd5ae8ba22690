// LoRA fine-tuning end to end on the tiny config (train.init_from + [lora]): the
// first step's loss is the base's, the base stays frozen (no gradients, no AdamW
// state, unchanged weights), checkpoints hold the adapters and the base's
// identity only, resume is exact, and a wrong base is refused naming both files.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/check.h"
#include "core/hdf5_file.h"
#include "core/parallel.h"
#include "helpers.h"
#include "layers/lora.h"
#include "layers/shamn_model.h"
#include "train/adapter_checkpoint.h"
#include "train/model_checkpoint.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

using namespace shamn;
using namespace shamn::test;

namespace {

const std::vector<std::string> kTargets = {"layers.*.mixer.out", "layers.*.memory.query",
                                           "layers.*.moe.router_group", "layers.*.moe.experts.*.up",
                                           "layers.*.moe.experts.*.down"};

std::vector<std::string> lora_sets(const std::string& base, int64_t steps, int64_t rank = 4) {
  std::string targets = "lora.targets=[";
  for (size_t i = 0; i < kTargets.size(); ++i) targets += (i ? ", \"" : "\"") + kTargets[i] + "\"";
  return {"train.max_steps=" + std::to_string(steps),
          "train.init_from=\"" + base + "\"",
          "lora.rank=" + std::to_string(rank),
          "lora.alpha=8.0",
          targets + "]",
          "optim.lr=1e-2"};
}

// The "loss" field of metrics.jsonl's record for `step`, as written.
std::string logged_loss(const std::string& metrics_path, int64_t step) {
  const std::string text = read_text(metrics_path);
  const std::string head = "{\"step\":" + std::to_string(step) + ",\"loss\":";
  const size_t at = text.find(head);
  REQUIRE(at != std::string::npos);
  return text.substr(at + head.size(), text.find(',', at + head.size()) - at - head.size());
}

// A trained base: 4 steps of the tiny config, so it is not a fresh init.
std::string make_base(const TrainFixture& fx, const std::string& name, int64_t seed = 1) {
  train(fx.config(name, {"train.max_steps=4", "train.seed=" + std::to_string(seed)}), quiet());
  return checkpoint_file(fx.path(name), 4);
}

}  // namespace

TEST_CASE("a LoRA run starts at its base's loss, trains only the adapters and saves only them",
          "[train][lora]") {
  TrainFixture fx("lora_run");
  const std::string base = make_base(fx, "base");

  // What the base weighs in at, and the same first step from it without adapters.
  train(fx.config("full", {"train.max_steps=1", "optim.warmup_steps=1", "train.init_from=\"" + base + "\""}),
        quiet());

  Shamn base_model(fx.config("x").model);
  load_model_tensors(Hdf5Reader(base), base_model);
  std::vector<NamedVar> frozen;  // the run's base parameters, seen from the hook
  TrainOptions o = quiet();
  o.after_backward = [&](int64_t step, Module& model) {
    for (const NamedVar& p : model.named_parameters()) {
      INFO(p.name << " at step " << step);
      REQUIRE(p.var.grad().defined() == is_lora_parameter(p.name));  // no gradient for the base
      REQUIRE(p.var.requires_grad() == is_lora_parameter(p.name));
    }
    if (step == 6)
      for (const NamedVar& p : model.named_parameters())
        if (!is_lora_parameter(p.name)) frozen.push_back(p);
  };
  const TrainResult r = train(fx.config("lora", lora_sets(base, 6)), o);
  CHECK(r.step == 6);

  // Step 0's forward pass is the base's: the first logged loss is bitwise the full fine-tune's.
  CHECK(logged_loss(fx.path("lora/metrics.jsonl"), 1) == logged_loss(fx.path("full/metrics.jsonl"), 1));
  CHECK(logged_loss(fx.path("lora/metrics.jsonl"), 6) != logged_loss(fx.path("lora/metrics.jsonl"), 1));

  // The base's weights, after 5 optimizer steps (and the last one only moves adapters' slots).
  const std::vector<NamedVar> original = base_model.named_parameters();
  REQUIRE(frozen.size() == original.size());
  for (size_t i = 0; i < frozen.size(); ++i) {
    INFO(frozen[i].name);
    CHECK(frozen[i].name == original[i].name);
    CHECK(bitwise_equal(frozen[i].var.value(), original[i].var.value()));
  }

  // The checkpoint: adapters, their moments and the base's identity; nothing of the base.
  const std::string ckpt = checkpoint_file(fx.path("lora"), 6);
  const Hdf5Reader reader(ckpt);
  size_t adapters = 0;
  for (const std::string& p : reader.datasets("/model")) {
    INFO(p);
    CHECK(is_lora_parameter(dotted_name("/model", p)));
    ++adapters;
  }
  CHECK(adapters ==
        2 * (2 + 1 + 2 + 2 * 4 + 2 * 4));  // mixer.out x2, query x1, router_group x2, experts 2 x 4 x 2
  for (const std::string& p : reader.datasets("/optim")) {
    INFO(p);
    CHECK(is_lora_parameter(dotted_name("/optim", p)));
  }
  CHECK(reader.datasets("/optim").size() == 2 * adapters);
  CHECK(reader.has_dataset("/model/layers/1/moe/experts/3/down/lora_b"));
  const AdapterIdentity id = read_adapter_identity(reader);
  CHECK(id.base_crc32 == base_checksum(base_model));
  CHECK(id.base_file == base);
  CHECK(id.lora.rank == 4);
  CHECK(id.lora.alpha == 8.0);
  CHECK(id.lora.targets == kTargets);
  CHECK(std::filesystem::file_size(ckpt) * 4 < std::filesystem::file_size(base));
  // B moved off zero.
  const Tensor b = reader.read_tensor("/model/layers/0/mixer/out/lora_b");
  double sum_abs = 0;
  for (int64_t i = 0; i < b.numel(); ++i) sum_abs += std::abs(b.item(i));
  CHECK(sum_abs > 0);
}

TEST_CASE("an adapter run resumes exactly", "[train][lora]") {
  TrainFixture fx("lora_resume");
  const std::string base = make_base(fx, "base");
  std::vector<std::string> sets = lora_sets(base, 8);
  sets.insert(sets.end(), {"train.checkpoint_every=4", "train.eval_every=4", "train.grad_accum=2"});
  train(fx.config("whole", sets), quiet());

  TrainOptions stop = quiet();
  stop.after_backward = [](int64_t step, Module&) {
    if (step == 5) throw InputError("stopped for the test");  // dies mid-run: ckpt_4 is what is left
  };
  CHECK_THROWS(train(fx.config("split", sets), stop));
  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("split");
  CHECK(train(fx.config("split", sets), resume).step == 8);

  require_same_tensors(checkpoint_file(fx.path("whole"), 8), checkpoint_file(fx.path("split"), 8));
  CHECK(metrics_without_timing(fx.path("whole/metrics.jsonl")) ==
        metrics_without_timing(fx.path("split/metrics.jsonl")));
}

TEST_CASE("lora.rslora scales the term by alpha / sqrt(rank)", "[train][lora]") {
  // At rank 4, rsLoRA's alpha 8 is a scale of 8 / 2 = 4, as alpha 16 is without
  // it (both exact in floating point): the two runs are the same to the bit,
  // and differ from rsLoRA's alpha 16 from the second step (B is 0 at the first).
  TrainFixture fx("lora_rslora");
  const std::string base = make_base(fx, "base");
  const auto run = [&](const std::string& name, const std::string& alpha, bool rslora) {
    std::vector<std::string> sets = lora_sets(base, 3);
    sets.push_back("lora.alpha=" + alpha);
    if (rslora) sets.push_back("lora.rslora=true");
    train(fx.config(name, sets), quiet());
  };
  run("rs", "8.0", true);
  run("plain", "16.0", false);
  CHECK(logged_loss(fx.path("rs/metrics.jsonl"), 3) == logged_loss(fx.path("plain/metrics.jsonl"), 3));
  run("rs16", "16.0", true);
  CHECK(logged_loss(fx.path("rs16/metrics.jsonl"), 1) == logged_loss(fx.path("rs/metrics.jsonl"), 1));
  CHECK(logged_loss(fx.path("rs16/metrics.jsonl"), 3) != logged_loss(fx.path("rs/metrics.jsonl"), 3));
  const AdapterIdentity id = read_adapter_identity(Hdf5Reader(checkpoint_file(fx.path("rs"), 3)));
  CHECK(id.lora.rslora);
  CHECK(id.lora.scale() == 4.0);
  CHECK_FALSE(read_adapter_identity(Hdf5Reader(checkpoint_file(fx.path("plain"), 3))).lora.rslora);
}

TEST_CASE("an adapter paired with another base is refused, naming both files", "[train][lora]") {
  TrainFixture fx("lora_wrong_base");
  const std::string base = make_base(fx, "base");
  const std::string other = make_base(fx, "other", 2);  // same architecture, other weights
  train(fx.config("run", lora_sets(base, 2)), quiet());
  const std::string adapter = checkpoint_file(fx.path("run"), 2);

  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("run");
  std::vector<std::string> sets = lora_sets(other, 4);
  CHECK_THROWS_WITH(train(fx.config("run", sets), resume),
                    Catch::Contains(adapter) && Catch::Contains(other) && Catch::Contains(base) &&
                        Catch::Contains("trained on another base model"));

  // Other adapter settings than the checkpoint's: refused too, before any tensor is read.
  CHECK_THROWS_WITH(train(fx.config("run", lora_sets(base, 4, 8)), resume),
                    Catch::Contains("holds adapters of rank 4") && Catch::Contains("asks for rank 8"));
  sets = lora_sets(base, 4);
  sets.push_back("lora.rslora=true");
  CHECK_THROWS_WITH(train(fx.config("run", sets), resume),
                    Catch::Contains("holds adapters of rank 4, alpha 8 on") &&
                        Catch::Contains("asks for rank 4, alpha 8 (rslora: alpha / sqrt(rank)) on"));

  // An adapter checkpoint is not a model: as a base, or where a model is read.
  CHECK_THROWS_WITH(train(fx.config("again", lora_sets(adapter, 2)), quiet()),
                    Catch::Contains(adapter) && Catch::Contains("is a LoRA adapter checkpoint"));
  Shamn model(fx.config("x").model);
  CHECK_THROWS_WITH(load_model_tensors(Hdf5Reader(adapter), model),
                    Catch::Contains("is a LoRA adapter checkpoint") && Catch::Contains(base));

  // A run without adapters does not resume from one with them, nor the other way round.
  AdamW optimizer(split_weight_decay(model.named_parameters(), 0.1));
  CHECK_THROWS_WITH(load_train_checkpoint(adapter, model, optimizer),
                    Catch::Contains("is a LoRA adapter checkpoint (adapters only)"));
  const AdapterIdentity id{base_checksum(model), base, {4, 8.0, kTargets}};
  CHECK_THROWS_WITH(load_train_checkpoint(base, model, optimizer, &id),
                    Catch::Contains("holds a whole model, not LoRA adapters"));
}

TEST_CASE(
    "lora.dropout: the base's first step, other training than without it, any thread count, exact resume",
    "[train][lora][dropout]") {
  TrainFixture fx("lora_dropout");
  const std::string base = make_base(fx, "base");
  std::vector<std::string> sets = lora_sets(base, 6);
  sets.insert(sets.end(), {"train.checkpoint_every=3", "train.grad_accum=2"});
  train(fx.config("plain", sets), quiet());
  sets.push_back("lora.dropout=0.25");
  ThreadCountGuard restore;
  set_num_threads(1);
  train(fx.config("one", sets), quiet());
  set_num_threads(2);
  train(fx.config("two", sets), quiet());

  // B is 0 at the first step, so the masks change nothing there; they do after.
  CHECK(logged_loss(fx.path("one/metrics.jsonl"), 1) == logged_loss(fx.path("plain/metrics.jsonl"), 1));
  CHECK(logged_loss(fx.path("one/metrics.jsonl"), 6) != logged_loss(fx.path("plain/metrics.jsonl"), 6));
  // The masks are the run's (seed, micro-batch, layer), not the threads'.
  require_same_tensors(checkpoint_file(fx.path("one"), 6), checkpoint_file(fx.path("two"), 6));
  CHECK(metrics_without_timing(fx.path("one/metrics.jsonl")) ==
        metrics_without_timing(fx.path("two/metrics.jsonl")));

  // Stopped after step 4, resumed from step 3's checkpoint: the same masks again.
  TrainOptions stop = quiet();
  stop.after_backward = [](int64_t step, Module&) {
    if (step == 5) throw InputError("stopped for the test");
  };
  CHECK_THROWS(train(fx.config("split", sets), stop));
  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("split");
  CHECK(train(fx.config("split", sets), resume).step == 6);
  require_same_tensors(checkpoint_file(fx.path("one"), 6), checkpoint_file(fx.path("split"), 6));
}
