// Model checkpoints: round trip, and loading rejects what does not fit.
#include <filesystem>

#include "core/hdf5_file.h"
#include "helpers.h"
#include "layers/shamn_model.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"
#include "train_fixture.h"

using namespace shamn;

namespace {
const char* const kConfig = test::kMiniModelToml;

std::string temp_path(const std::string& name) {
  const auto dir = test::scratch_root() / "ckpt";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
}  // namespace

TEST_CASE("model checkpoints round-trip every tensor and the config", "[train][checkpoint]") {
  const ModelConfig config = ModelConfig::from_toml(kConfig, "cfg");
  Shamn a(config);
  a.init(5);
  const std::string path = temp_path("roundtrip.h5");
  save_model_checkpoint(path, a, config.to_toml(), 17);
  Hdf5Reader reader(path);
  CHECK(reader.int_attribute("step") == 17);
  CHECK(reader.int_attribute("format_version") == 1);
  const ModelConfig loaded = read_checkpoint_config(reader);
  CHECK(loaded.to_toml() == config.to_toml());
  Shamn b(loaded);
  b.init(6);  // different values, to be overwritten
  load_model_tensors(reader, b);
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(bitwise_equal(pa[i].var.value(), pb[i].var.value()));
  const auto ba = a.named_buffers(), bb = b.named_buffers();
  for (size_t i = 0; i < ba.size(); ++i) CHECK(bitwise_equal(ba[i].tensor, bb[i].tensor));
}

TEST_CASE("loading rejects missing, extra and mis-shaped tensors by name", "[train][checkpoint]") {
  const ModelConfig config = ModelConfig::from_toml(kConfig, "cfg");
  Shamn model(config);
  model.init(1);
  auto write_with = [&](const std::string& name, const std::function<void(Hdf5Writer&)>& edit) {
    const std::string path = temp_path(name);
    Hdf5Writer w(path, "model");
    for (const auto& p : model.named_parameters())
      if (p.name != "layers.1.mixer.conv") w.write_tensor(checkpoint_path("/model", p.name), p.var.value());
    for (const auto& b : model.named_buffers()) w.write_tensor(checkpoint_path("/model", b.name), b.tensor);
    edit(w);
    w.set_string_attribute("config", config.to_toml());
    w.set_int_attribute("format_version", 1);
    w.set_int_attribute("step", 0);
    w.commit();
    return path;
  };
  Shamn target(config);
  {
    Hdf5Reader r(write_with("missing.h5", [](Hdf5Writer&) {}));
    CHECK_THROWS_WITH(load_model_tensors(r, target), Catch::Contains("missing tensor 'layers.1.mixer.conv'"));
  }
  {
    Hdf5Reader r(write_with("shape.h5", [](Hdf5Writer& w) {
      w.write_tensor("/model/layers/1/mixer/conv", Tensor::zeros({16, 3}));
    }));
    CHECK_THROWS_WITH(
        load_model_tensors(r, target),
        Catch::Contains("tensor 'layers.1.mixer.conv' has shape [16, 3] but the model needs [16, 4]"));
  }
  {
    Hdf5Reader r(write_with("extra.h5", [](Hdf5Writer& w) {
      w.write_tensor("/model/layers/1/mixer/conv", Tensor::zeros({16, 4}));
      w.write_tensor("/model/layers/1/mixer/gate", Tensor::zeros({4}));
    }));
    CHECK_THROWS_WITH(load_model_tensors(r, target),
                      Catch::Contains("has tensor 'layers.1.mixer.gate' that this model does not have"));
  }
  {
    Hdf5Reader r(write_with("dtype.h5", [](Hdf5Writer& w) {
      w.write_tensor("/model/layers/1/mixer/conv", Tensor::zeros({16, 4}, DType::f64));
    }));
    CHECK_THROWS_WITH(load_model_tensors(r, target), Catch::Contains("is f64 but the model needs f32"));
  }
}

TEST_CASE("a truncated or foreign file is a clear error and a failed write leaves nothing",
          "[train][checkpoint]") {
  const std::string path = temp_path("truncated.h5");
  {
    const ModelConfig config = ModelConfig::from_toml(kConfig, "cfg");
    Shamn model(config);
    save_model_checkpoint(path, model, config.to_toml(), 0);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  CHECK_THROWS_AS(Hdf5Reader(path), InputError);
  CHECK_THROWS_WITH(Hdf5Reader(temp_path("absent.h5")), Catch::Contains("does not exist"));

  const std::string never = temp_path("never.h5");
  std::filesystem::remove(never);
  {
    Hdf5Writer w(never, "model");
    w.write_tensor("/model/x", Tensor::zeros({2}));
  }  // destroyed without commit()
  CHECK_FALSE(std::filesystem::exists(never));
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(never).parent_path()))
    CHECK(entry.path().filename().string().find(".never.h5.tmp") == std::string::npos);
}
