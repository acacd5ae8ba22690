// The .shq loader trusts nothing: a table of corruptions of valid exported
// images, each of which must be rejected with an InputError naming what is
// wrong. Directory and header corruptions re-seal the checksums
// (tests/fuzz/shq_reseal.h) so that the check under test is the one that fires.
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/model_config.h"
#include "infer/export_model.h"
#include "infer/infer_model.h"
#include "infer/quant_tiles.h"
#include "infer/shq_file.h"
#include "infer/shq_writer.h"
#include "layers/shamn_model.h"
#include "tests/fuzz/shq_reseal.h"
#include "tests/scratch_dir.h"
#include "train/model_checkpoint.h"

using namespace shamn;
using Image = std::vector<uint8_t>;

namespace {

constexpr const char* kModelToml = R"([model]
vocab_size = 64
dim = 64
n_layers = 2
[model.sparse]
block = 32
sparsity = 0.5
[model.memory]
size = 16
topk = 2
[model.moe]
groups = 2
experts_per_group = 2
)";

// One per process: the cached checkpoint outlives any one test.
const std::filesystem::path& temp_dir() {
  static const std::filesystem::path dir = test::scratch_dir("shq");
  return dir;
}

const std::string& checkpoint_path() {
  static const std::string path = [] {
    const ModelConfig config = ModelConfig::from_toml(kModelToml, "test config");
    Shamn model(config);
    model.init(3);
    const std::string p = (temp_dir() / "model.h5").string();
    save_model_checkpoint(p, model, config.to_toml(), 42);
    return p;
  }();
  return path;
}

const Image& valid_image(ShqQuant quant) {
  static std::map<ShqQuant, Image> images;
  auto it = images.find(quant);
  if (it == images.end())
    it = images.emplace(quant, export_model_image(checkpoint_path(), {quant, "", {}})).first;
  return it->second;
}

// The loader's message, or "<loaded>"; exceptions other than InputError fail the test.
std::string load_error(const Image& image) {
  try {
    InferModel model(ShqFile::from_bytes(image.data(), image.size(), "corrupt.shq"));
    return "<loaded>";
  } catch (const InputError& e) {
    return e.what();
  }
}

ShqHeader header(const Image& image) {
  ShqHeader h;
  std::memcpy(&h, image.data(), sizeof(h));
  return h;
}

void set_header(Image& image, const ShqHeader& h) { std::memcpy(image.data(), &h, sizeof(h)); }

size_t entry_at(const Image& image, uint32_t i) {
  return header(image).directory_offset + i * sizeof(ShqTensorEntry);
}

ShqTensorEntry entry(const Image& image, uint32_t i) {
  ShqTensorEntry e;
  std::memcpy(&e, image.data() + entry_at(image, i), sizeof(e));
  return e;
}

uint32_t find_entry(const Image& image, const std::string& name) {
  for (uint32_t i = 0; i < header(image).tensor_count; ++i)
    if (name == entry(image, i).name) return i;
  FAIL("no tensor " << name);
  return 0;
}

// Applies `patch` to tensor `name`'s entry and re-seals the directory and header.
void patch_entry(Image& image, const std::string& name, const std::function<void(ShqTensorEntry&)>& patch,
                 bool tensor_crcs = false) {
  const uint32_t i = find_entry(image, name);
  ShqTensorEntry e = entry(image, i);
  patch(e);
  std::memcpy(image.data() + entry_at(image, i), &e, sizeof(e));
  testing::shq_reseal(image, tensor_crcs);
}

void patch_header(Image& image, const std::function<void(ShqHeader&)>& patch) {
  ShqHeader h = header(image);
  patch(h);
  set_header(image, h);
  testing::shq_reseal(image, false);
}

// Rewrites the image's tensors through ShqWriter, leaving out `drop` and adding `extra`.
Image rewrite(const Image& image, const std::string& drop, bool extra) {
  const ShqFile f = ShqFile::from_bytes(image.data(), image.size(), "valid.shq");
  ShqWriter w(f.quant(), f.config_toml(), f.tokenizer_text(), static_cast<int64_t>(f.header().step));
  for (const ShqTensor& t : f.tensors()) {
    if (t.name == drop) continue;
    const auto* p = static_cast<const uint8_t*>(t.data);
    w.add(t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.bytes));
  }
  if (extra) w.add("layers.9.unexpected", ShqDType::f32, {4}, std::vector<uint8_t>(16, 0));
  return w.image();
}

const std::string kValues = "layers.0.mixer.out.values";
const std::string kColIndex = "layers.0.mixer.out.col_index";
const std::string kGain = "final_norm.gain";

struct Corruption {
  std::string what;
  // Corrupts the image; returns a substring the error message must contain.
  std::function<std::string(Image&)> apply;
};

std::vector<Corruption> corruptions() {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<Corruption> c;
  c.push_back({"bad magic", [](Image& im) {
                 im[0] = 'X';
                 return "bad magic";
               }});
  c.push_back({"version 1 (before tiles)", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) { h.version = 1; });
                 return "format version 1";
               }});
  c.push_back({"a newer version", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) { h.version = kShqVersion + 1; });
                 return "format version " + std::to_string(kShqVersion + 1);
               }});
  c.push_back({"version 2 with a source_id", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) {
                   h.version = 2;
                   h.set_source_id(7);
                 });
                 return "version 2 has no source_id";
               }});
  c.push_back({"header byte flipped", [](Image& im) {
                 im[offsetof(ShqHeader, step)] ^= 1;
                 return "header fails its checksum";
               }});
  for (const size_t keep : {size_t{0}, size_t{10}, size_t{127}})
    c.push_back({"truncated to " + std::to_string(keep), [keep](Image& im) {
                   im.resize(keep);
                   return std::to_string(keep) + " bytes: too short for the 128-byte header";
                 }});
  for (const int which : {0, 1, 2})
    c.push_back({"truncated after the header #" + std::to_string(which), [which](Image& im) {
                   const size_t keep = which == 0 ? 128 : which == 1 ? im.size() / 2 : im.size() - 1;
                   im.resize(keep);
                   return "is " + std::to_string(keep) + " bytes but its header says";
                 }});
  c.push_back({"trailing byte", [](Image& im) {
                 im.push_back(0);
                 return "(trailing bytes)";
               }});
  c.push_back({"tensor_count 0", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) { h.tensor_count = 0; });
                 return "tensor_count 0 is out of range";
               }});
  c.push_back({"tensor_count huge", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) { h.tensor_count = 0xffffffffu; });
                 return "tensor_count 4294967295 is out of range";
               }});
  c.push_back({"tensor_count past the directory", [](Image& im) {
                 // The directory then runs into the config, whose text reads as an entry with no NUL.
                 patch_header(im, [](ShqHeader& h) { h.tensor_count += 1; });
                 return "has an empty or unterminated name";
               }});
  c.push_back({"directory past the end", [](Image& im) {
                 const uint64_t size = im.size();
                 patch_header(im, [size](ShqHeader& h) { h.directory_offset = size; });
                 return "the tensor directory (offset " + std::to_string(size);
               }});
  c.push_back({"directory offset overflowing", [kMax](Image& im) {
                 patch_header(im, [kMax](ShqHeader& h) { h.directory_offset = kMax - 10; });
                 return "lies outside the";
               }});
  c.push_back({"directory inside the header", [](Image& im) {
                 patch_header(im, [](ShqHeader& h) { h.directory_offset = 64; });
                 return "the tensor directory (offset 64";
               }});
  c.push_back({"config past the end", [kMax](Image& im) {
                 patch_header(im, [kMax](ShqHeader& h) { h.config_offset = kMax - 3; });
                 return "the config (offset";
               }});
  c.push_back({"directory byte flipped", [](Image& im) {
                 im[header(im).directory_offset + 70] ^= 0x10;
                 return "the tensor directory fails its checksum";
               }});
  c.push_back({"config byte flipped", [](Image& im) {
                 im[header(im).config_offset] ^= 0x20;
                 return "the config fails its checksum";
               }});
  c.push_back({"tensor data byte flipped", [](Image& im) {
                 im[entry(im, find_entry(im, kValues)).offset + 5] ^= 0x01;
                 return "tensor '" + kValues + "' fails its checksum";
               }});
  c.push_back({"offset not aligned", [](Image& im) {
                 patch_entry(im, kValues, [](ShqTensorEntry& e) { e.offset += 4; });
                 return "tensor '" + kValues + "': data offset";
               }});
  c.push_back({"offset + bytes overflowing", [kMax](Image& im) {
                 patch_entry(im, kValues, [kMax](ShqTensorEntry& e) { e.offset = kMax - 63; });
                 return "tensor '" + kValues + "': data (offset 18446744073709551552";
               }});
  c.push_back({"bytes not matching the shape", [](Image& im) {
                 patch_entry(im, kValues, [](ShqTensorEntry& e) { e.bytes += 64; });
                 return "tensor '" + kValues + "': ";
               }});
  for (const int64_t dim : {int64_t{0}, int64_t{-1}, int64_t{1} << 40})
    c.push_back({"shape dim " + std::to_string(dim), [dim](Image& im) {
                   patch_entry(im, kValues, [dim](ShqTensorEntry& e) {
                     e.shape[0] = dim;
                     if (dim > 0) e.shape[1] = dim;  // 2^40 x 2^40 overflows 64 bits
                   });
                   return "is invalid (a dim <= 0, too many elements";
                 }});
  c.push_back({"unused shape entry set", [](Image& im) {
                 patch_entry(im, kGain, [](ShqTensorEntry& e) { e.shape[2] = 1; });
                 return "tensor '" + kGain + "': unused shape entries must be 0";
               }});
  for (const uint32_t ndim : {0u, 5u})
    c.push_back({"ndim " + std::to_string(ndim), [ndim](Image& im) {
                   patch_entry(im, kValues, [ndim](ShqTensorEntry& e) { e.ndim = ndim; });
                   return "ndim " + std::to_string(ndim) + " is out of range 1..4";
                 }});
  c.push_back({"unknown dtype", [](Image& im) {
                 patch_entry(im, kValues, [](ShqTensorEntry& e) { e.dtype = 9; });
                 return "tensor '" + kValues + "': unknown dtype 9";
               }});
  c.push_back({"block 16", [](Image& im) {
                 patch_entry(im, kValues, [](ShqTensorEntry& e) { e.block = 16; });
                 return "tensor '" + kValues + "': quantisation block 16";
               }});
  c.push_back({"duplicate name", [](Image& im) {
                 const std::string first = entry(im, 0).name;
                 patch_entry(im, entry(im, 1).name, [&](ShqTensorEntry& e) {
                   std::memset(e.name, 0, sizeof(e.name));
                   std::memcpy(e.name, first.data(), first.size());
                 });
                 return "tensor '" + first + "' appears twice";
               }});
  c.push_back({"unterminated name", [](Image& im) {
                 patch_entry(im, kGain, [](ShqTensorEntry& e) { std::memset(e.name, 'a', sizeof(e.name)); });
                 return "has an empty or unterminated name";
               }});
  c.push_back({"empty name", [](Image& im) {
                 patch_entry(im, kGain, [](ShqTensorEntry& e) { std::memset(e.name, 0, sizeof(e.name)); });
                 return "has an empty or unterminated name";
               }});
  c.push_back({"non-printable name", [](Image& im) {
                 patch_entry(im, kGain, [](ShqTensorEntry& e) { e.name[0] = '\n'; });
                 return "has a non-printable name";
               }});
  c.push_back({"overlapping tensors", [](Image& im) {
                 const uint64_t at = entry(im, 0).offset;
                 patch_entry(
                     im, entry(im, 1).name, [at](ShqTensorEntry& e) { e.offset = at; }, true);
                 return "overlaps tensor '";
               }});
  c.push_back({"tensor overlapping the config", [](Image& im) {
                 const uint64_t config = header(im).config_offset / 64 * 64;
                 patch_entry(
                     im, kGain, [config](ShqTensorEntry& e) { e.offset = config; }, true);
                 return "overlaps";
               }});
  c.push_back({"shape that disagrees with the config", [](Image& im) {
                 patch_entry(im, kGain, [](ShqTensorEntry& e) {
                   e.ndim = 2;
                   e.shape[0] = 16;
                   e.shape[1] = 4;
                 });
                 return "tensor '" + kGain + "' has shape [16, 4] but the config implies [64]";
               }});
  c.push_back({"dtype the runtime cannot use", [](Image& im) {
                 patch_entry(im, kGain,
                             [](ShqTensorEntry& e) { e.dtype = static_cast<uint32_t>(ShqDType::i32); });
                 return "tensor '" + kGain + "' has dtype i32";
               }});
  for (const std::string& name : {kColIndex, std::string("embed.bucket_index")})
    for (const int32_t bad : {-1, 1 << 20})
      c.push_back({name + " value " + std::to_string(bad), [name, bad](Image& im) {
                     const ShqTensorEntry e = entry(im, find_entry(im, name));
                     std::memcpy(im.data() + e.offset + 4, &bad, 4);
                     testing::shq_reseal(im, true);
                     return "tensor '" + name + "' element 1 is " + std::to_string(bad) + ", outside [0, ";
                   }});
  c.push_back({"extra tensor", [](Image& im) {
                 im = rewrite(im, "", true);
                 return std::string("has a tensor 'layers.9.unexpected' that its config does not call for");
               }});
  c.push_back({"missing tensor", [](Image& im) {
                 im = rewrite(im, kColIndex, false);
                 return "has no tensor '" + kColIndex + "' (the config calls for it)";
               }});
  return c;
}

}  // namespace

TEST_CASE("valid .shq images load and run for every quantisation", "[infer][shq]") {
  for (const ShqQuant quant : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    INFO("quant " << shq_quant_name(quant));
    const Image& image = valid_image(quant);
    CHECK(load_error(image) == "<loaded>");
    const InferModel model(ShqFile::from_bytes(image.data(), image.size(), "valid.shq"));
    CHECK(model.file().quant() == quant);
    CHECK(model.file().header().step == 42);
    DecodeState state = model.new_state();
    std::vector<float> logits(64);
    const int32_t tokens[3] = {0, 5, 63};
    model.forward(tokens, 3, state, logits.data(), false);
    for (float v : logits) CHECK(std::isfinite(v));
  }
}

TEST_CASE("every corruption of a .shq image is rejected with a message naming it", "[infer][shq]") {
  for (const ShqQuant quant : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4}) {
    for (const Corruption& c : corruptions()) {
      INFO("quant " << shq_quant_name(quant) << ", corruption: " << c.what);
      Image image = valid_image(quant);
      const std::string expected = c.apply(image);
      const std::string message = load_error(image);
      CHECK_THAT(message, Catch::Contains(expected));
      CHECK_THAT(message, Catch::Contains("corrupt.shq"));
    }
  }
}

TEST_CASE("ShqFile::open maps an exported file and names a missing one", "[infer][shq]") {
  const std::string path = (temp_dir() / "model.shq").string();
  export_model(checkpoint_path(), {ShqQuant::int8, "", {}}, path);
  const ShqFile f = ShqFile::open(path);
  CHECK(f.path() == path);
  CHECK(f.file_bytes() == valid_image(ShqQuant::int8).size());
  const InferModel model(ShqFile::open(path));
  CHECK(model.vocab_size() == 64);

  const std::string absent = (temp_dir() / "absent.shq").string();
  CHECK_THROWS_WITH(ShqFile::open(absent), Catch::Contains("cannot open model file '" + absent + "'"));

  const std::string tiny = (temp_dir() / "tiny.shq").string();
  std::ofstream(tiny) << "SHAMN";
  CHECK_THROWS_WITH(ShqFile::open(tiny), Catch::Contains("'" + tiny + "' is 5 bytes: too short"));

  // A FIFO no one writes is refused at once (a blocking open would wait for a writer for ever).
  const std::string fifo = (temp_dir() / "pipe.shq").string();
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(ShqFile::open(fifo, "adapter file"),
                    Catch::Contains("adapter file '" + fifo + "' is not a regular file"));
}

TEST_CASE("tiled dtypes take whole 16-row tiles and need a 2-D or 4-D shape", "[infer][shq]") {
  uint64_t bytes = 0;
  // 40 rows x 64 values: 3 tiles of 16 rows, 2 blocks per row.
  REQUIRE(shq_tensor_bytes(ShqDType::q8_0x16, {40, 64}, &bytes));
  CHECK(bytes == 3 * 2 * sizeof(TileQ8));
  REQUIRE(shq_tensor_bytes(ShqDType::q4_0x16, {40, 64}, &bytes));
  CHECK(bytes == 3 * 2 * sizeof(TileQ4));
  // Block-sparse values [nob, b, a, b]: nob * b rows of a segments of b values.
  REQUIRE(shq_tensor_bytes(ShqDType::q8_0x16, {2, 16, 3, 16}, &bytes));
  CHECK(bytes == 2 * 3 * sizeof(TileQ8));
  REQUIRE(shq_tensor_bytes(ShqDType::q8_0, {2, 16, 3, 16}, &bytes));
  CHECK(bytes == 2 * 16 * 3 * sizeof(BlockQ8));
  CHECK_FALSE(shq_tensor_bytes(ShqDType::q8_0x16, {512}, &bytes));
  CHECK_FALSE(shq_tensor_bytes(ShqDType::q4_0x16, {4, 4, 4}, &bytes));
  CHECK_FALSE(shq_tensor_bytes(ShqDType::q8_0x16, {int64_t{1} << 40, int64_t{1} << 40}, &bytes));
}
