// The trainer end to end on the tiny config: exact resume, signals, non-finite
// steps, refusing to overwrite a run, falling back from a damaged checkpoint, and
// learning a corpus of known entropy.
#include <hdf5.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>

#include "autograd/ops.h"
#include "core/check.h"
#include "core/hdf5_file.h"
#include "core/product_precision.h"
#include "data/batch_loader.h"
#include "data/token_file.h"
#include "helpers.h"
#include "layers/shamn_model.h"
#include "train/run_dir_lock.h"
#include "train/stop_signal.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

using namespace shamn;
using namespace shamn::test;

namespace {}  // namespace

TEST_CASE("20 steps equal 10 steps, a stop, and a resume for 10 more", "[train][trainer]") {
  TrainFixture fx("resume");
  const std::vector<std::string> sets = {"train.max_steps=20", "train.checkpoint_every=0",
                                         "train.eval_every=5", "train.grad_accum=2", "optim.warmup_steps=4"};
  const TrainResult whole = train(fx.config("whole", sets), quiet());
  CHECK(whole.step == 20);
  CHECK_FALSE(whole.interrupted);

  // The same run, asked to stop (as SIGINT does) during step 10.
  TrainOptions stop_at_10 = quiet();
  stop_at_10.after_backward = [](int64_t step, Module&) {
    if (step == 10) StopSignal::request(SIGINT);
  };
  const TrainResult first = train(fx.config("split", sets), stop_at_10);
  CHECK(first.interrupted);
  CHECK(first.step == 10);
  CHECK(std::filesystem::exists(checkpoint_file(fx.path("split"), 10)));

  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("split");
  const TrainResult second = train(fx.config("ignored", sets), resume);
  CHECK(second.step == 20);
  CHECK_FALSE(second.interrupted);

  require_same_tensors(checkpoint_file(fx.path("whole"), 20), checkpoint_file(fx.path("split"), 20));
  CHECK(metrics_without_timing(fx.path("whole/metrics.jsonl")) ==
        metrics_without_timing(fx.path("split/metrics.jsonl")));
  CHECK(whole.last_val_loss == second.last_val_loss);
  CHECK(whole.best_val_loss == second.best_val_loss);
}

TEST_CASE("a resume is exact when a step reaches few of the parameters", "[train][trainer]") {
  // Two tokens a step over 16 experts: most experts miss most steps. One reached
  // before keeps a (zeroed) gradient and is updated every step after; the
  // checkpoint must say which were reached, or the resumed run skips them.
  TrainFixture fx("sparse_resume");
  const std::vector<std::string> sets = {
      "train.max_steps=20", "train.checkpoint_every=0",      "train.eval_every=0", "train.batch_size=1",
      "train.seq_len=2",    "model.moe.experts_per_group=8", "model.moe.k=1",      "optim.warmup_steps=4"};
  TrainOptions whole_options = quiet();
  int64_t zeroed_at_11 = 0, unreached_at_11 = 0;
  whole_options.after_backward = [&](int64_t step, Module& model) {
    if (step != 11) return;
    for (const NamedVar& p : model.named_parameters()) {
      if (!p.var.has_grad()) {
        ++unreached_at_11;
        continue;
      }
      const Tensor& g = p.var.grad();
      const float* x = g.data<float>();
      if (std::all_of(x, x + g.numel(), [](float v) { return v == 0.0f; })) ++zeroed_at_11;
    }
  };
  train(fx.config("whole", sets), whole_options);
  CHECK(zeroed_at_11 > 0);     // reached before step 11, not in it
  CHECK(unreached_at_11 > 0);  // never reached by step 11

  TrainOptions stop_at_10 = quiet();
  stop_at_10.after_backward = [](int64_t step, Module&) {
    if (step == 10) StopSignal::request(SIGINT);
  };
  train(fx.config("split", sets), stop_at_10);
  const std::string ckpt = checkpoint_file(fx.path("split"), 10);
  REQUIRE(std::filesystem::exists(ckpt));
  std::filesystem::copy(fx.path("split"), fx.path("older"));
  {
    // A checkpoint from before the attribute: the moments tell which were reached.
    const hid_t file = H5Fopen(checkpoint_file(fx.path("older"), 10).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(H5Adelete(file, "optim_unreached") >= 0);
    H5Fclose(file);
  }
  for (const char* run : {"split", "older"}) {
    INFO(run);
    TrainOptions resume = quiet();
    resume.resume_dir = fx.path(run);
    CHECK(train(fx.config("ignored", sets), resume).step == 20);
    require_same_tensors(checkpoint_file(fx.path("whole"), 20), checkpoint_file(fx.path(run), 20));
    CHECK(metrics_without_timing(fx.path("whole/metrics.jsonl")) ==
          metrics_without_timing(fx.path(std::string(run) + "/metrics.jsonl")));
  }
}

TEST_CASE("a step's gradient is the mean of its micro-batches' loss gradients", "[train][trainer]") {
  TrainFixture fx("accum");
  const RunConfig c = fx.config("accum", {"train.max_steps=1", "train.grad_accum=3", "train.eval_every=0",
                                          "train.checkpoint_every=0", "optim.warmup_steps=0"});
  std::map<std::string, Tensor> trained;
  TrainOptions grads = quiet();
  grads.after_backward = [&](int64_t step, Module& model) {
    if (step != 1) return;
    for (const NamedVar& p : model.named_parameters())
      if (p.var.grad().defined()) trained.emplace(p.name, p.var.grad().clone());
  };
  train(c, grads);
  // The same model and the loader's first three batches, by hand.
  Shamn model(c.model);
  model.init(static_cast<uint64_t>(c.train.seed), c.weight_init());
  BatchLoader loader(std::make_shared<const TokenFile>(c.data.train_path), c.model.vocab_size,
                     c.train.batch_size, c.train.seq_len, static_cast<uint64_t>(c.train.seed), false);
  Var total;
  for (int i = 0; i < 3; ++i) {
    const Batch b = loader.next();
    const Var loss = model.loss(b.inputs, b.targets).loss;
    total = i == 0 ? loss : add(total, loss);
  }
  scale(total, 1.0 / 3.0).backward();
  int64_t compared = 0;
  for (const NamedVar& p : model.named_parameters()) {
    if (!p.var.grad().defined()) continue;
    INFO(p.name);
    REQUIRE(trained.count(p.name) == 1);
    const Tensor want = p.var.grad(), got = trained.at(p.name);
    double scale_of = 0, worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      scale_of = std::max(scale_of, std::abs(want.item(i)));
      worst = test::worse(worst, std::abs(got.item(i) - want.item(i)));
    }
    // The trainer sums the micro-batches in a tree, by hand they are summed in turn:
    // rounding apart, no more. A missing or doubled 1/grad_accum is 3x or 1/3 off.
    CHECK(worst <= 1e-4 * scale_of + 1e-9);
    ++compared;
  }
  CHECK(compared == static_cast<int64_t>(trained.size()));
  CHECK(compared > 10);
}

TEST_CASE("training is identical with 1 and 2 threads and without prefetch", "[train][trainer]") {
  TrainFixture fx("threads");
  const std::vector<std::string> sets = {"train.max_steps=6", "train.eval_every=3"};
  ThreadCountGuard restore;
  set_num_threads(1);
  train(fx.config("one", sets), quiet());
  {
    set_num_threads(2);
    train(fx.config("two", sets), quiet());
    std::vector<std::string> no_prefetch = sets;
    no_prefetch.push_back("train.prefetch=false");
    train(fx.config("sync", no_prefetch), quiet());
  }
  require_same_tensors(checkpoint_file(fx.path("one"), 6), checkpoint_file(fx.path("two"), 6));
  require_same_tensors(checkpoint_file(fx.path("one"), 6), checkpoint_file(fx.path("sync"), 6));
  CHECK(metrics_without_timing(fx.path("one/metrics.jsonl")) ==
        metrics_without_timing(fx.path("two/metrics.jsonl")));
}

TEST_CASE("bf16 products: identical with 1 and 2 threads, not the f32 numbers, still learning",
          "[train][trainer][bf16]") {
  TrainFixture fx("bf16");
  const std::vector<std::string> sets = {"train.max_steps=6", "train.eval_every=3",
                                         "train.precision=\"bf16\""};
  ThreadCountGuard restore;
  set_num_threads(1);
  const TrainResult one = train(fx.config("one", sets), quiet());
  set_num_threads(2);
  train(fx.config("two", sets), quiet());
  const TrainResult f32 = train(fx.config("f32", {"train.max_steps=6", "train.eval_every=3"}), quiet());
  require_same_tensors(checkpoint_file(fx.path("one"), 6), checkpoint_file(fx.path("two"), 6));
  CHECK(metrics_without_timing(fx.path("one/metrics.jsonl")) ==
        metrics_without_timing(fx.path("two/metrics.jsonl")));
  CHECK(one.last_val_loss != f32.last_val_loss);
  CHECK(std::abs(one.last_val_loss - f32.last_val_loss) < 0.05 * f32.last_val_loss);
  CHECK(product_precision() == ProductPrecision::f32);  // the run's setting ends with it
}

TEST_CASE("checkpoints: every N steps, the last N kept, best.h5, resumable contents", "[train][trainer]") {
  TrainFixture fx("ckpts");
  const TrainResult r = train(fx.config("run", {"train.max_steps=12", "train.checkpoint_every=2",
                                                "train.keep_last=2", "train.eval_every=4"}),
                              quiet());
  const auto kept = list_checkpoints(fx.path("run"));
  REQUIRE(kept.size() == 2);
  CHECK(kept[0] == checkpoint_file(fx.path("run"), 10));
  CHECK(kept[1] == checkpoint_file(fx.path("run"), 12));
  REQUIRE(std::filesystem::exists(best_checkpoint_file(fx.path("run"))));
  CHECK(r.last_checkpoint == kept[1]);

  const Hdf5Reader best(best_checkpoint_file(fx.path("run")));
  CHECK(best.float_attribute("best_val_loss") == r.best_val_loss);
  CHECK(best.int_attribute("step") % 4 == 0);
  const Hdf5Reader last(kept[1]);
  CHECK(last.int_attribute("step") == 12);
  CHECK(last.int_attribute("optim_step") == 12);
  CHECK(last.int_attribute("data_position") == 12);
  CHECK(last.int_attribute("tokens_seen") == 12 * 8 * 64);
  CHECK(last.has_dataset("/model/embed/table"));
  CHECK(last.has_dataset("/optim/m/embed/table"));
  CHECK(last.has_dataset("/optim/v/layers/1/memory/values"));
  const RunConfig saved = RunConfig::from_toml(last.string_attribute("config"), "saved");
  CHECK(saved.to_toml() == fx.config("run", {"train.max_steps=12", "train.checkpoint_every=2",
                                             "train.keep_last=2", "train.eval_every=4"})
                               .to_toml());
  CHECK(read_text(fx.path("run/config.toml")) == saved.to_toml());
}

TEST_CASE("a non-finite step is skipped, several in a row stop the run", "[train][trainer]") {
  TrainFixture fx("nan");
  auto poison = [](int64_t from, int64_t to) {
    return [from, to](int64_t step, Module& model) {
      if (step < from || step > to) return;
      Tensor g = model.named_parameters()[0].var.grad();
      g.fill(std::nan(""));
    };
  };
  SECTION("one bad step is skipped and the run goes on") {
    TrainOptions o = quiet();
    o.after_backward = poison(3, 3);
    const TrainResult r = train(fx.config("one", {"train.max_steps=6"}), o);
    CHECK(r.step == 6);
    const std::string metrics = read_text(fx.path("one/metrics.jsonl"));
    CHECK_THAT(metrics, Catch::Contains("{\"step\":3,") && Catch::Contains("\"grad_norm\":null"));
    const Hdf5Reader last(checkpoint_file(fx.path("one"), 6));
    CHECK(last.int_attribute("optim_step") == 5);  // AdamW stepped 5 times in 6 steps
  }
  SECTION("max_bad_steps in a row stop it, keeping the last good checkpoint") {
    TrainOptions o = quiet();
    o.after_backward = poison(6, 100);
    try {
      train(fx.config("many", {"train.max_steps=20", "train.checkpoint_every=4", "train.max_bad_steps=3"}),
            o);
      FAIL("the run did not stop");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("not finite for 3 steps in a row") &&
                               Catch::Contains("up to step 8") &&
                               Catch::Contains(checkpoint_file(fx.path("many"), 4)));
    }
    CHECK(list_checkpoints(fx.path("many")).back() == checkpoint_file(fx.path("many"), 4));
  }
}

TEST_CASE("a new run never overwrites an existing one", "[train][trainer]") {
  TrainFixture fx("exists");
  train(fx.config("run", {"train.max_steps=2"}), quiet());
  const std::string before = read_text(checkpoint_file(fx.path("run"), 2));
  CHECK_THROWS_WITH(train(fx.config("run", {"train.max_steps=2"}), quiet()),
                    Catch::Contains("already holds a run") && Catch::Contains("--resume"));
  CHECK(read_text(checkpoint_file(fx.path("run"), 2)) == before);
}

TEST_CASE("resume falls back from a damaged newest checkpoint and refuses a changed model",
          "[train][trainer]") {
  TrainFixture fx("damaged");
  const std::vector<std::string> sets = {"train.max_steps=8", "train.checkpoint_every=4",
                                         "train.keep_last=5"};
  train(fx.config("run", sets), quiet());
  const std::string last = checkpoint_file(fx.path("run"), 8);
  std::filesystem::copy_file(last, fx.path("reference.h5"));
  std::filesystem::resize_file(last, std::filesystem::file_size(last) / 2);  // a torn write

  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("run");
  CHECK_THROWS_WITH(train(fx.config("run", {"train.max_steps=8", "model.dim=32"}), resume),
                    Catch::Contains("[model] tables of the config differ"));
  const TrainResult r = train(fx.config("run", sets), resume);  // resumes from step 4
  CHECK(r.step == 8);
  require_same_tensors(fx.path("reference.h5"), last);
  CHECK(std::filesystem::exists(last + ".damaged"));  // moved aside, not lost
}

TEST_CASE("a damaged newest checkpoint does not push the resumed run's checkpoints out", "[train][trainer]") {
  // keep_last = 1 with a torn ckpt_8 left in place: pruning after the resumed
  // run's ckpt_6 would keep only the torn file and delete ckpt_4 and ckpt_6.
  TrainFixture fx("damaged_prune");
  train(fx.config("run", {"train.max_steps=8", "train.checkpoint_every=4", "train.keep_last=2"}), quiet());
  const std::string torn = checkpoint_file(fx.path("run"), 8);
  std::filesystem::resize_file(torn, std::filesystem::file_size(torn) / 2);

  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("run");
  const std::vector<std::string> sets = {"train.max_steps=6", "train.checkpoint_every=2",
                                         "train.keep_last=1"};
  const TrainResult r = train(fx.config("run", sets), resume);  // from step 4 to 6
  CHECK(r.step == 6);
  CHECK(r.last_checkpoint == checkpoint_file(fx.path("run"), 6));
  CHECK(list_checkpoints(fx.path("run")) == std::vector<std::string>{checkpoint_file(fx.path("run"), 6)});
  CHECK(std::filesystem::file_size(torn + ".damaged") > 0);
  const std::vector<std::string> more = {"train.max_steps=7", "train.checkpoint_every=2",
                                         "train.keep_last=1"};
  CHECK(train(fx.config("run", more), resume).step == 7);  // ckpt_6 loads
}

TEST_CASE("a run directory another process trains in is refused, and free again once it ends",
          "[train][trainer]") {
  TrainFixture fx("locked");
  train(fx.config("run", {"train.max_steps=2"}), quiet());
  TrainOptions resume = quiet();
  resume.resume_dir = fx.path("run");
  const std::vector<std::string> more = {"train.max_steps=3"};
  {
    // Another open file description's flock, as another process's would be.
    const RunDirLock other(fx.path("run"));
    CHECK_THROWS_WITH(train(fx.config("run", more), resume),
                      Catch::Contains("another shamn train is running in '" + fx.path("run") + "'") &&
                          Catch::Contains(".train.lock"));
  }
  CHECK(list_checkpoints(fx.path("run")).back() == checkpoint_file(fx.path("run"), 2));
  CHECK(train(fx.config("run", more), resume).step == 3);
}

TEST_CASE("a model-only checkpoint starts a run but cannot resume one", "[train][trainer]") {
  TrainFixture fx("init_from");
  train(fx.config("a", {"train.max_steps=3"}), quiet());
  const TrainResult r = train(
      fx.config("b", {"train.max_steps=2", "train.init_from=\"" + checkpoint_file(fx.path("a"), 3) + "\""}),
      quiet());
  CHECK(r.step == 2);
  CHECK_THROWS_WITH(
      train(fx.config("c", {"train.max_steps=2", "train.init_from=\"" + fx.path("nope.h5") + "\""}), quiet()),
      Catch::Contains("nope.h5"));
}

TEST_CASE("the tiny model's loss falls close to the corpus entropy", "[train][trainer]") {
  TrainFixture fx("entropy", 64, 4);  // entropy ln 4 = 1.386 nats per token
  const TrainResult r =
      train(fx.config("run", {"train.max_steps=500", "train.eval_every=0", "train.eval_batches=16",
                              "optim.lr=1e-2", "optim.min_lr=1e-3"}),
            quiet());
  INFO("val loss " << r.last_val_loss << ", entropy " << fx.entropy());
  CHECK(std::log(64.0) - r.last_val_loss > 2.5);  // from ~4.16 at the start
  CHECK(r.last_val_loss < fx.entropy() + 0.1);    // close to the floor
  CHECK(r.last_val_loss > fx.entropy() - 0.05);   // and never below it (held-out data)
}
