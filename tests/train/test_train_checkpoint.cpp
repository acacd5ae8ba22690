// Training checkpoints: optimizer state round trip, checksums that catch a
// flipped byte, loads that change nothing when they fail, and run-directory
// housekeeping (listing, pruning, stale temporary files).
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/hdf5_file.h"
#include "helpers.h"
#include "layers/shamn_model.h"
#include "optim/adamw.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"
#include "train/train_checkpoint.h"
#include "train_fixture.h"

using namespace shamn;

namespace {
const char* const kConfig = test::kMiniModelToml;

std::filesystem::path scratch(const std::string& name) { return test::scratch_dir("train_ckpt/" + name); }

// A model and an optimizer that has taken two steps (so the moments are non-zero).
struct Trained {
  ModelConfig config = ModelConfig::from_toml(kConfig, "cfg");
  Shamn model{config};
  AdamW optimizer;
  explicit Trained(uint64_t seed)
      : optimizer(split_weight_decay((model.init(seed), model.named_parameters()), 0.1)) {
    Tensor tokens = test::random_indices({2, 8}, 64, seed);
    Tensor targets = test::random_indices({2, 8}, 64, seed + 1);
    for (int i = 0; i < 2; ++i) {
      optimizer.zero_grad();
      model.loss(tokens, targets).loss.backward();
      optimizer.step(1e-2);
    }
  }
};

std::vector<NamedTensor> all_state(const Trained& t) {
  std::vector<NamedTensor> out;
  for (const NamedVar& p : t.model.named_parameters()) out.push_back({p.name, p.var.value().clone()});
  for (const NamedTensor& m : t.optimizer.state_tensors()) out.push_back({m.name, m.tensor.clone()});
  return out;
}

void require_equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    REQUIRE(bitwise_equal(a[i].tensor, b[i].tensor));
  }
}

// Flips one byte inside the stored values of `t` (found by its leading bytes).
void flip_byte_of(const std::string& path, const Tensor& t) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string needle(static_cast<const char*>(t.raw_data()), 32);
  const size_t at = bytes.find(needle);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(needle, at + 1) == std::string::npos);
  bytes[at + 5] ^= 0x10;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}
}  // namespace

TEST_CASE("a training checkpoint restores model, moments and state exactly", "[train][checkpoint]") {
  const auto dir = scratch("roundtrip");
  Trained a(1);
  TrainState s;
  s.step = 7;
  s.optim_step = 2;
  s.data_seed = 99;
  s.data_position = 14;
  s.best_val_loss = 3.25;
  s.bad_steps = 1;
  s.tokens_seen = 112;
  s.elapsed_s = 1.5;
  const std::string path = (dir / "c.h5").string();
  save_train_checkpoint(path, a.model, a.optimizer, a.config.to_toml(), s);
  CHECK(is_train_checkpoint(path));

  Trained b(2);
  const TrainState r = load_train_checkpoint(path, b.model, b.optimizer);
  CHECK(r.step == 7);
  CHECK(r.optim_step == 2);
  CHECK(b.optimizer.step_count() == 2);
  CHECK(r.data_seed == 99);
  CHECK(r.data_position == 14);
  CHECK(r.best_val_loss == 3.25);
  CHECK(r.bad_steps == 1);
  CHECK(r.tokens_seen == 112);
  CHECK(r.elapsed_s == 1.5);
  require_equal(all_state(a), all_state(b));

  // It is also a valid model checkpoint (SPEC section 4).
  Shamn m(read_checkpoint_config(Hdf5Reader(path)));
  load_model_tensors(Hdf5Reader(path), m);
}

TEST_CASE("a flipped byte fails the checksum and changes nothing", "[train][checkpoint]") {
  const auto dir = scratch("checksum");
  Trained a(1);
  const std::string path = (dir / "c.h5").string();
  save_train_checkpoint(path, a.model, a.optimizer, a.config.to_toml(), {});

  SECTION("in a model tensor") {
    // A copy: named_parameters() returns a temporary vector.
    const NamedVar p = a.model.named_parameters().back();
    flip_byte_of(path, p.var.value());
  }
  SECTION("in an optimizer moment") { flip_byte_of(path, a.optimizer.state_tensors().back().tensor); }
  Trained b(2);
  const auto before = all_state(b);
  CHECK_THROWS_WITH(load_train_checkpoint(path, b.model, b.optimizer),
                    Catch::Contains("fails its checksum") && Catch::Contains("c.h5") &&
                        Catch::Contains("the file is corrupt"));
  require_equal(before, all_state(b));
}

TEST_CASE("an out-of-range state attribute is refused, naming it, and changes nothing",
          "[train][checkpoint]") {
  const auto dir = scratch("attributes");
  Trained a(1);
  TrainState s;
  s.step = 3;
  s.optim_step = 3;
  std::string name;
  SECTION("optim_step past the step") {
    s.optim_step = 5;
    name = "'optim_step' = 5";
  }
  SECTION("a negative step") {
    s.step = -2;
    s.optim_step = 0;
    name = "'step' = -2";
  }
  SECTION("a NaN best validation loss") {
    s.best_val_loss = std::nan("");
    name = "'best_val_loss'";
  }
  SECTION("negative elapsed time") {
    s.elapsed_s = -1;
    name = "'elapsed_s' = -1";
  }
  const std::string path = (dir / "c.h5").string();
  save_train_checkpoint(path, a.model, a.optimizer, a.config.to_toml(), s);
  Trained b(2);
  const auto before = all_state(b);
  CHECK_THROWS_WITH(load_train_checkpoint(path, b.model, b.optimizer),
                    Catch::Contains("c.h5") && Catch::Contains(name) && Catch::Contains("out of range"));
  require_equal(before, all_state(b));
}

TEST_CASE("a truncated or model-only file cannot be resumed from", "[train][checkpoint]") {
  const auto dir = scratch("bad");
  Trained a(1);
  const std::string model_only = (dir / "model.h5").string();
  save_model_checkpoint(model_only, a.model, a.config.to_toml(), 3);
  CHECK_FALSE(is_train_checkpoint(model_only));
  CHECK_THROWS_WITH(load_train_checkpoint(model_only, a.model, a.optimizer),
                    Catch::Contains("holds no optimizer state"));

  const std::string torn = (dir / "torn.h5").string();
  save_train_checkpoint(torn, a.model, a.optimizer, a.config.to_toml(), {});
  std::filesystem::resize_file(torn, std::filesystem::file_size(torn) * 2 / 3);
  CHECK_THROWS_AS(load_train_checkpoint(torn, a.model, a.optimizer), InputError);
}

TEST_CASE("run directories: listing by step, pruning, stale temporary files", "[train][checkpoint]") {
  const auto dir = scratch("rundir");
  for (int64_t step : {5, 100, 20, 100000000}) std::ofstream(checkpoint_file(dir.string(), step)) << "x";
  std::ofstream(dir / "best.h5") << "x";
  std::ofstream(dir / ".ckpt_00000030.h5.tmp.4242") << "partial";
  std::ofstream(dir / "notes.txt") << "keep me";
  const auto all = list_checkpoints(dir.string());
  REQUIRE(all.size() == 4);
  CHECK(all[0] == checkpoint_file(dir.string(), 5));
  CHECK(all[3] == checkpoint_file(dir.string(), 100000000));
  prune_checkpoints(dir.string(), 2, checkpoint_file(dir.string(), 100000000));
  const auto kept = list_checkpoints(dir.string());
  REQUIRE(kept.size() == 2);
  CHECK(kept[0] == checkpoint_file(dir.string(), 100));
  // A later step's file than the one just written does not count, nor go.
  std::ofstream(checkpoint_file(dir.string(), 7)) << "x";
  std::ofstream(checkpoint_file(dir.string(), 9)) << "x";
  prune_checkpoints(dir.string(), 1, checkpoint_file(dir.string(), 9));
  CHECK(list_checkpoints(dir.string()) == std::vector<std::string>{checkpoint_file(dir.string(), 9),
                                                                   checkpoint_file(dir.string(), 100),
                                                                   checkpoint_file(dir.string(), 100000000)});
  CHECK_THROWS(prune_checkpoints(dir.string(), 1, checkpoint_file(dir.string(), 8)));
  CHECK(set_aside_damaged_checkpoint(checkpoint_file(dir.string(), 9)) ==
        checkpoint_file(dir.string(), 9) + ".damaged");
  std::ofstream(checkpoint_file(dir.string(), 9)) << "y";
  CHECK(set_aside_damaged_checkpoint(checkpoint_file(dir.string(), 9)) ==
        checkpoint_file(dir.string(), 9) + ".damaged.1");
  CHECK(list_checkpoints(dir.string()) == std::vector<std::string>{checkpoint_file(dir.string(), 100),
                                                                   checkpoint_file(dir.string(), 100000000)});
  CHECK(std::filesystem::exists(dir / "best.h5"));
  CHECK(remove_stale_temp_files(dir.string()) == 1);
  CHECK(std::filesystem::exists(dir / "notes.txt"));
}

namespace {
// Replaces the root string attribute `name` of an HDF5 file, as a hand edit would.
void rewrite_string_attribute(const std::string& path, const std::string& name, const std::string& value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  REQUIRE(H5Adelete(file, name.c_str()) >= 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* data = value.c_str();
  const bool written = attr >= 0 && H5Awrite(attr, type, &data) >= 0;
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
  REQUIRE(written);
}
}  // namespace

TEST_CASE("a malformed line of optim_late_updates is refused, naming it, and changes nothing",
          "[train][checkpoint]") {
  const auto dir = scratch("late_updates");
  Trained a(1);
  TrainState s;
  s.step = 3;
  s.optim_step = 3;
  const std::string path = (dir / "c.h5").string();
  save_train_checkpoint(path, a.model, a.optimizer, a.config.to_toml(), s);
  const std::string reached = a.model.named_parameters().front().name;
  REQUIRE(a.optimizer.unreached().empty());

  // The well-formed line loads (so what the sections refuse is the line alone).
  rewrite_string_attribute(path, "optim_late_updates", reached + " 2\n");
  Trained b(2);
  CHECK(load_train_checkpoint(path, b.model, b.optimizer).optim_step == 3);

  std::string attribute, line;  // the attribute written and the line refused
  SECTION("no count") { line = reached; }
  SECTION("a count of 0") { line = reached + " 0"; }
  SECTION("as many updates as steps") { line = reached + " 3"; }
  SECTION("a field too many") { line = reached + " 1 x"; }
  SECTION("a name the model lacks") { line = "layers.99.nothing 1"; }
  SECTION("a name twice") {
    attribute = reached + " 1\n";
    line = reached + " 2";
  }
  rewrite_string_attribute(path, "optim_late_updates", attribute + line + "\n");
  Trained c(2);
  const auto before = all_state(c);
  CHECK_THROWS_WITH(load_train_checkpoint(path, c.model, c.optimizer),
                    Catch::Contains("c.h5") && Catch::Contains("'optim_late_updates'") &&
                        Catch::Contains("line '" + line + "'"));
  require_equal(before, all_state(c));
}
