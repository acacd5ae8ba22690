// What export refuses before it writes anything: checkpoints whose tensors the
// runtime's layout transforms or quantisers cannot take.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/fault.h"
#include "core/hdf5_file.h"
#include "infer/export_model.h"
#include "infer/infer_test_model.h"
#include "infer/shq_file.h"
#include "infer/shq_writer.h"

namespace shamn {
namespace {

using test::model_toml;
using test::TestModel;

std::string dataset_path(const std::string& name) {
  std::string path = "/model/" + name;
  std::replace(path.begin(), path.end(), '.', '/');
  return path;
}

// A copy of checkpoint `from` as `to`, with tensor `name` (dotted) set to what `edit`
// makes of it and format_version `version`.
template <class Edit>
std::string rewrite_checkpoint(const std::string& from, const std::string& to, const std::string& name,
                               Edit edit, int64_t version = kCheckpointFormatVersion) {
  const Hdf5Reader reader(from);
  Hdf5Writer writer(to, "checkpoint");
  bool found = false;
  for (const std::string& path : reader.datasets("/model")) {
    Tensor t = reader.read_tensor(path);
    if (path == dataset_path(name)) {
      t = edit(t);
      found = true;
    }
    writer.write_tensor(path, t);
  }
  REQUIRE(found);
  writer.set_string_attribute("config", reader.string_attribute("config"));
  writer.set_int_attribute("format_version", version);
  writer.set_int_attribute("step", reader.int_attribute("step"));
  writer.commit();
  return to;
}

Tensor with_value(Tensor t, int64_t at, float value) {
  Tensor copy = t.clone();
  copy.data<float>()[at] = value;
  return copy;
}

}  // namespace

TEST_CASE("export refuses non-finite weights, naming the tensor and element", "[infer][export]") {
  const TestModel tm(model_toml(), "export_nan");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::string with_nan = rewrite_checkpoint(tm.checkpoint, tm.dir + "/nan.h5", "layers.1.memory.values",
                                                  [&](const Tensor& t) { return with_value(t, 5, nan); });
  const std::string with_inf = rewrite_checkpoint(tm.checkpoint, tm.dir + "/inf.h5", "layers.0.mixer.conv",
                                                  [&](const Tensor& t) { return with_value(t, 3, -inf); });
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    INFO(shq_quant_name(q));
    CHECK_THROWS_WITH(
        export_model_image(with_nan, {q, "", {}}),
        Catch::Contains("'" + with_nan + "': tensor 'layers.1.memory.values' holds nan at element 5"));
    CHECK_THROWS_WITH(export_model_image(with_inf, {q, "", {}}),
                      Catch::Contains("tensor 'layers.0.mixer.conv' holds -inf at element 3"));
  }
}

TEST_CASE("export refuses block-sparse values that are not square blocks, and empty tensors",
          "[infer][export]") {
  const TestModel tm(model_toml(), "export_shape");
  // [2, 1, 32, 32] as [2, 1, 32, 16]: the transform to row-major blocks read past it.
  const std::string narrow = rewrite_checkpoint(tm.checkpoint, tm.dir + "/narrow.h5",
                                                "layers.0.mixer.out.values", [](const Tensor& t) {
                                                  return Tensor::zeros({t.size(0), t.size(1), t.size(2), 16});
                                                });
  CHECK_THROWS_WITH(
      export_model_image(narrow, {ShqQuant::int8, "", {}}),
      Catch::Contains("block-sparse tensor 'layers.0.mixer.out.values' has shape [2, 1, 32, 16]") &&
          Catch::Contains("must be square"));
  const std::string wide = rewrite_checkpoint(tm.checkpoint, tm.dir + "/wide.h5", "layers.0.mixer.out.values",
                                              [](const Tensor& t) {
                                                return Tensor::zeros({t.size(0), t.size(1), t.size(2), 64});
                                              });
  CHECK_THROWS_WITH(export_model_image(wide, {ShqQuant::f32, "", {}}), Catch::Contains("must be square"));
  const std::string empty =
      rewrite_checkpoint(tm.checkpoint, tm.dir + "/empty.h5", "layers.1.memory.values", [](const Tensor& t) {
        return Tensor::zeros({t.size(0), 0});
      });
  CHECK_THROWS_WITH(export_model_image(empty, {ShqQuant::int8, "", {}}),
                    Catch::Contains("tensor 'layers.1.memory.values' has shape [64, 0], no elements"));
  // Another shape of the right square blocks is the runtime's check, after export's transforms.
  const std::string fewer = rewrite_checkpoint(tm.checkpoint, tm.dir + "/fewer.h5",
                                               "layers.0.mixer.out.values", [](const Tensor& t) {
                                                 return Tensor::zeros({1, t.size(1), t.size(2), t.size(3)});
                                               });
  CHECK_THROWS_WITH(export_model_image(fewer, {ShqQuant::int8, "", {}}),
                    Catch::Contains("'layers.0.mixer.out.values' has shape"));
}

TEST_CASE("export refuses a checkpoint of another format_version", "[infer][export]") {
  const TestModel tm(model_toml(), "export_version");
  const std::string v99 = rewrite_checkpoint(
      tm.checkpoint, tm.dir + "/v99.h5", "final_norm.gain", [](const Tensor& t) { return t; }, 99);
  CHECK_THROWS_WITH(
      export_model_image(v99, {ShqQuant::int8, "", {}}),
      Catch::Contains("'" + v99 + "' has checkpoint format_version 99; this shamn reads version 1"));
}

TEST_CASE("an export that fails while writing leaves the old file whole and nothing beside it",
          "[infer][export]") {
  const TestModel tm(model_toml(), "export_atomic");
  const std::string out = tm.dir + "/model.shq";
  export_model(tm.checkpoint, {ShqQuant::int8, "", {}}, out);
  const auto before = std::filesystem::file_size(out);
  // int4 makes a smaller file: a bare overwrite cut at 4,096 bytes would show.
  for (const char* spec : {"shq.bytes:4096:enospc", "shq.fsync:1:eio", "shq.rename:1:eio"}) {
    INFO(spec);
    fault::set_for_testing(spec);
    CHECK_THROWS_WITH(export_model(tm.checkpoint, {ShqQuant::int4, "", {}}, out),
                      Catch::Contains("'" + out + "'"));
    fault::set_for_testing("");
    CHECK(std::filesystem::file_size(out) == before);
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tm.dir))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"model.h5", "model.shq"});
  }
  CHECK_NOTHROW(InferModel(ShqFile::open(out)));
}

TEST_CASE("a model file whose experts are stored as different types is refused at load", "[infer][export]") {
  const TestModel tm(model_toml(), "mixed_experts");
  const std::vector<uint8_t> good = export_model_image(tm.checkpoint, {ShqQuant::int8, "", {}});
  const ShqFile file = ShqFile::from_bytes(good.data(), good.size(), "good");
  // The same file with expert 1's up projection in f32 (zeros) and the others int8.
  ShqWriter writer(ShqQuant::int8, file.config_toml(), "", 0);
  const std::string odd = "layers.0.moe.experts.1.up.values";
  for (const ShqTensor& t : file.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (t.name == odd)
      writer.add(t.name, ShqDType::f32, t.shape,
                 std::vector<uint8_t>(shape_numel(t.shape) * sizeof(float), 0));
    else
      writer.add(t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.bytes));
  }
  const std::vector<uint8_t> mixed = writer.image();
  CHECK_THROWS_WITH(
      InferModel(ShqFile::from_bytes(mixed.data(), mixed.size(), "mixed.shq")),
      Catch::Contains("model file 'mixed.shq': tensor '" + odd + "' is stored as another type"));
}

}  // namespace shamn
