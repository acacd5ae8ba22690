#include "infer/export_model.h"

#include <cstring>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/hdf5_file.h"
#include "core/model_config.h"
#include "infer/infer_model.h"
#include "infer/quant_blocks.h"
#include "infer/shq_writer.h"

namespace shamn {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The matrices the runtime multiplies activations by: quantised. Their rows are
// along the input dim, so each row quantises on its own.
bool is_quantised_matrix(const std::string& name) {
  for (const char* suffix : {".mixer.out.values", ".up.values", ".down.values", ".memory.query.weight",
                             ".memory.keys1", ".memory.keys2", ".memory.values", ".router_group.weight",
                             ".router_expert.weight"})
    if (ends_with(name, suffix)) return true;
  return name == "embed.table" || name == "head.weight";
}

template <class Block, class Quantize>
std::vector<uint8_t> quantise_rows(const float* x, int64_t rows, int64_t cols, Quantize quantize) {
  const int64_t bpr = quant_blocks(cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * bpr) * sizeof(Block));
  auto* blocks = reinterpret_cast<Block*>(out.data());
  for (int64_t r = 0; r < rows; ++r) quantize(x + r * cols, blocks + r * bpr, cols);
  return out;
}

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// values [nob, a, b, b] -> [nob, b, a, b]: output row r*b+i gets its a blocks side by side.
Tensor block_rows_major(const Tensor& v) {
  const int64_t nob = v.size(0), a = v.size(1), b = v.size(2);
  Tensor out = Tensor::empty({nob, b, a, b});
  const float* src = v.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < nob; ++r)
    for (int64_t m = 0; m < a; ++m)
      for (int64_t i = 0; i < b; ++i)
        std::memcpy(dst + ((r * b + i) * a + m) * b, src + ((r * a + m) * b + i) * b, b * sizeof(float));
  return out;
}

std::string spec_name(const std::string& dataset) {
  std::string name = dataset.substr(std::strlen("/model/"));
  for (char& c : name)
    if (c == '/') c = '.';
  return name;
}

}  // namespace

ShqQuant shq_quant_from_string(const std::string& name) {
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4})
    if (name == shq_quant_name(q)) return q;
  SHAMN_INPUT_CHECK(false, "--quant '", name, "' is unknown: use f32, int8 or int4");
  return ShqQuant::f32;
}

ShqDType export_dtype(const std::string& name, ShqQuant quant) {
  if (ends_with(name, "_index")) return ShqDType::i32;
  if (quant == ShqQuant::f32 || !is_quantised_matrix(name)) return ShqDType::f32;
  // int4 keeps the tensors whose error reaches every token at 8 bits: the hash
  // table (the embedding and, tied, the output head: at 4 bits it alone cost
  // 2.8% perplexity on the Brown small model) and the tiny routers, whose
  // discrete choices flip easily. They are a few percent of the weights.
  if (quant == ShqQuant::int4 && (name == "embed.table" || name == "head.weight" || ends_with(name, "router_group.weight") ||
                                  ends_with(name, "router_expert.weight")))
    return ShqDType::q8_0;
  return quant == ShqQuant::int8 ? ShqDType::q8_0 : ShqDType::q4_0;
}

std::vector<uint8_t> export_model_image(const std::string& checkpoint, const ExportOptions& options) {
  const Hdf5Reader reader(checkpoint);
  SHAMN_INPUT_CHECK(reader.has_attribute("format_version") && reader.has_attribute("config"), "'", checkpoint,
                    "' is not a shamn checkpoint (no format_version or config attribute)");
  const ModelConfig config = ModelConfig::from_toml(reader.string_attribute("config"), checkpoint + " (attribute config)");
  const int64_t step = reader.has_attribute("step") ? reader.int_attribute("step") : 0;
  ShqWriter writer(options.quant, config.to_toml(), options.tokenizer_text, step);
  for (const std::string& dataset : reader.datasets("/model")) {
    const std::string name = spec_name(dataset);
    Tensor t = reader.read_tensor(dataset);
    const ShqDType dtype = export_dtype(name, options.quant);
    SHAMN_INPUT_CHECK(t.dtype() == (dtype == ShqDType::i32 ? DType::i32 : DType::f32), "'", checkpoint,
                      "': tensor '", name, "' is ", t.str(), ", expected ",
                      dtype == ShqDType::i32 ? "int32" : "float32");
    if (t.dim() == 4 && ends_with(name, ".values")) t = block_rows_major(t);
    const int64_t cols = t.size(-1), rows = t.numel() / cols;
    std::vector<uint8_t> data;
    if (dtype == ShqDType::q8_0)
      data = quantise_rows<BlockQ8>(t.data<float>(), rows, cols, quantize_row_q8);
    else if (dtype == ShqDType::q4_0)
      data = quantise_rows<BlockQ4>(t.data<float>(), rows, cols, quantize_row_q4_fitted);
    else
      data = raw_bytes(t);
    writer.add(name, dtype, t.shape(), std::move(data));
  }
  std::vector<uint8_t> image = writer.image();
  InferModel check(ShqFile::from_bytes(image.data(), image.size(), checkpoint + " (exported)"));
  return image;
}

void export_model(const std::string& checkpoint, const ExportOptions& options, const std::string& out) {
  const std::vector<uint8_t> image = export_model_image(checkpoint, options);
  AtomicFile file(out);
  file.write(image.data(), image.size());
  file.commit();
}

}  // namespace shamn
