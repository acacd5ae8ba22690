#include "infer/export_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/hdf5_file.h"
#include "core/lora_scale.h"
#include "core/model_config.h"
#include "core/tensor_checksum.h"
#include "infer/infer_model.h"
#include "infer/lora_adapter.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"
#include "infer/shq_writer.h"

namespace shamn {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The matrices the runtime multiplies activations by: quantised. Their rows are
// along the input dim, so each row quantises on its own.
bool is_quantised_matrix(const std::string& name) {
  for (const char* suffix :
       {".mixer.out.values", ".up.values", ".down.values", ".memory.query.weight", ".memory.keys1",
        ".memory.keys2", ".memory.values", ".router_group.weight", ".router_expert.weight"})
    if (ends_with(name, suffix)) return true;
  return name == "embed.table" || name == "head.weight";
}

// x: [rows, cols] quantised along cols -> row-major blocks.
template <class Block, class Quantize>
std::vector<Block> quantise_rows(const float* x, int64_t rows, int64_t cols, Quantize quantize) {
  const int64_t bpr = quant_blocks(cols);
  std::vector<Block> out(static_cast<size_t>(rows * bpr));
  for (int64_t r = 0; r < rows; ++r) quantize(x + r * cols, out.data() + r * bpr, cols);
  return out;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

// Row-major blocks of a tensor [R, C] or block-sparse [nob, b, a, b] (R = nob * b
// rows of a segments) -> the file's bytes for `dtype`.
template <class Block, class Tile>
std::vector<uint8_t> layout_blocks(const std::vector<Block>& blocks, const Shape& shape, bool tiled) {
  if (!tiled) return as_bytes(blocks);
  const int64_t rows = shape.size() == 4 ? shape[0] * shape[1] : shape[0];
  const int64_t bpr = static_cast<int64_t>(blocks.size()) / rows;
  std::vector<Tile> tiles(static_cast<size_t>(row_tiles(rows) * bpr));
  pack_tiles(blocks.data(), rows, bpr, tiles.data());
  return as_bytes(tiles);
}

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// The shapes the transforms below assume, and finite values: a NaN has no int8 or int4
// code (each kernel level would round it its own way), and an infinite weight makes
// its block's scale infinite. The exported model is checked against its config after.
void check_exportable(const Tensor& t, const std::string& name, const std::string& checkpoint) {
  SHAMN_INPUT_CHECK(t.numel() > 0, "'", checkpoint, "': tensor '", name, "' has shape ", shape_str(t.shape()),
                    ", no elements");
  SHAMN_INPUT_CHECK(!(t.dim() == 4 && ends_with(name, ".values")) || t.size(3) == t.size(2), "'", checkpoint,
                    "': block-sparse tensor '", name, "' has shape ", shape_str(t.shape()),
                    "; its blocks must be square ([blocks, per row, block, block])");
  if (t.dtype() != DType::f32) return;
  const float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    SHAMN_INPUT_CHECK(std::isfinite(v[i]), "'", checkpoint, "': tensor '", name, "' holds ", v[i],
                      " at element ", i, " (flat index): a model with non-finite weights cannot be exported");
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

// A LoRA adapter checkpoint's factors by adapted matrix ("layers.1.memory.query").
struct LowRankFactors {
  Tensor a, b;  // A [r, in], B [out, r]
};

std::map<std::string, LowRankFactors> read_low_rank_factors(const Hdf5Reader& reader, int64_t rank) {
  const std::string& checkpoint = reader.path();
  std::map<std::string, LowRankFactors> factors;
  for (const std::string& dataset : reader.datasets("/model")) {
    const std::string name = spec_name(dataset);
    const bool is_a = ends_with(name, ".lora_a");
    SHAMN_INPUT_CHECK(is_a || ends_with(name, ".lora_b"), "'", checkpoint, "': tensor '", name,
                      "' is not a LoRA factor (an adapter checkpoint holds only those)");
    const Tensor t = reader.read_tensor(dataset);
    SHAMN_INPUT_CHECK(t.dtype() == DType::f32 && t.dim() == 2, "'", checkpoint, "': tensor '", name, "' is ",
                      t.str(), ", expected a float32 matrix");
    LowRankFactors& f = factors[name.substr(0, name.size() - std::strlen(".lora_a"))];
    (is_a ? f.a : f.b) = t;
  }
  SHAMN_INPUT_CHECK(!factors.empty(), "'", checkpoint, "' holds no LoRA factors");
  for (const auto& [matrix, f] : factors)
    SHAMN_INPUT_CHECK(f.a.defined() && f.b.defined() && f.a.size(0) == rank && f.b.size(1) == rank, "'",
                      checkpoint, "': matrix '", matrix, "' needs lora_a [", rank, ", in] and lora_b [out, ",
                      rank, "] (its lora_rank)");
  return factors;
}

// w [out, in] + scale * B A, each entry's sum over the rank in double, rounded once.
Tensor fold_low_rank(const Tensor& w, const LowRankFactors& f, double scale, const std::string& where) {
  const int64_t r = f.a.size(0);
  SHAMN_INPUT_CHECK(
      w.dtype() == DType::f32 && w.dim() == 2 && f.a.size(1) == w.size(1) && f.b.size(0) == w.size(0), where,
      ": the factors A ", f.a.str(), " and B ", f.b.str(), " do not fit the base's ", w.str());
  const int64_t out = w.size(0), in = w.size(1);
  Tensor merged = w.clone();
  const float *a = f.a.data<float>(), *b = f.b.data<float>();
  float* m = merged.data<float>();
  std::vector<double> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t k = 0; k < r; ++k) {
      const double bk = b[o * r + k];
      for (int64_t i = 0; i < in; ++i) row[i] += bk * a[k * in + i];
    }
    for (int64_t i = 0; i < in; ++i) m[o * in + i] = static_cast<float>(m[o * in + i] + scale * row[i]);
  }
  return merged;
}

// The header's step: the checkpoint's training step (0 where it has none).
int64_t training_step(const Hdf5Reader& checkpoint) {
  return checkpoint.has_attribute("step") ? checkpoint.int_attribute("step") : 0;
}

}  // namespace

std::vector<uint8_t> shq_tensor_data(const Tensor& t, ShqDType dtype) {
  if (!shq_dtype_quantized(dtype)) return raw_bytes(t);
  const int64_t cols = t.size(-1), rows = t.numel() / cols;
  if (dtype == ShqDType::q8_0 || dtype == ShqDType::q8_0x16)
    return layout_blocks<BlockQ8, TileQ8>(
        quantise_rows<BlockQ8>(t.data<float>(), rows, cols, quantize_row_q8), t.shape(),
        shq_dtype_tiled(dtype));
  return layout_blocks<BlockQ4, TileQ4>(
      quantise_rows<BlockQ4>(t.data<float>(), rows, cols, quantize_row_q4_fitted), t.shape(),
      shq_dtype_tiled(dtype));
}

ShqQuant shq_quant_from_string(const std::string& name) {
  for (ShqQuant q : {ShqQuant::f32, ShqQuant::int8, ShqQuant::int4})
    if (name == shq_quant_name(q)) return q;
  SHAMN_INPUT_CHECK(false, "--quant '", name, "' is unknown: use f32, int8 or int4");
  return ShqQuant::f32;
}

// Matrices the runtime multiplies activations by are stored in row-interleaved
// tiles (infer/quant_tiles.h), 3-6x faster to multiply than row-major blocks;
// those it only reads rows of (memory values, an untied embedding) stay
// row-major. A block-sparse row block is multiplied on its own, so its values
// tile only when the block is a multiple of the tile's 16 rows.
bool tiled_matrix(const std::string& name, const ModelConfig& config) {
  if (ends_with(name, ".memory.values")) return false;
  if (name == "embed.table") return config.tie_head;
  if (ends_with(name, ".values")) return config.block % kTileRows == 0;
  return true;
}

ShqDType export_dtype(const std::string& name, ShqQuant quant, const ModelConfig& config) {
  if (ends_with(name, "_index")) return ShqDType::i32;
  if (quant == ShqQuant::f32 || !is_quantised_matrix(name)) return ShqDType::f32;
  const bool tiled = tiled_matrix(name, config);
  // int4 keeps the tensors whose error reaches every token at 8 bits: the hash
  // table (the embedding and, tied, the output head: at 4 bits it alone cost
  // 2.8% perplexity on the Brown small model) and the tiny routers, whose
  // discrete choices flip easily. They are a few percent of the weights.
  if (quant == ShqQuant::int4 &&
      (name == "embed.table" || name == "head.weight" || ends_with(name, "router_group.weight") ||
       ends_with(name, "router_expert.weight")))
    return tiled ? ShqDType::q8_0x16 : ShqDType::q8_0;
  if (quant == ShqQuant::int8) return tiled ? ShqDType::q8_0x16 : ShqDType::q8_0;
  return tiled ? ShqDType::q4_0x16 : ShqDType::q4_0;
}

std::vector<uint8_t> export_model_image(const std::string& checkpoint, const ExportOptions& options) {
  const Hdf5Reader reader(checkpoint);
  SHAMN_INPUT_CHECK(reader.has_attribute("format_version") && reader.has_attribute("config"), "'", checkpoint,
                    "' is not a shamn checkpoint (no format_version or config attribute)");
  const int64_t version = reader.int_attribute("format_version");
  SHAMN_INPUT_CHECK(version == kCheckpointFormatVersion, "'", checkpoint, "' has checkpoint format_version ",
                    version, "; this shamn reads version ", kCheckpointFormatVersion);
  const ModelConfig config =
      ModelConfig::from_toml(reader.string_attribute("config"), checkpoint + " (attribute config)");
  ShqWriter writer(options.quant, config.to_toml(), options.tokenizer_text, training_step(reader));
  std::map<std::string, LowRankFactors> merge;
  const MergeAdapter& mo = options.merge;
  if (!mo.checkpoint.empty()) {
    SHAMN_INPUT_CHECK(mo.rank >= 1 && mo.alpha > 0 && std::isfinite(mo.alpha), "--merge: '", mo.checkpoint,
                      "' records lora_rank ", mo.rank, " and lora_alpha ", mo.alpha,
                      ": want a rank of at least 1 and a positive alpha");
    merge = read_low_rank_factors(Hdf5Reader(mo.checkpoint), mo.rank);
  }
  const double scale = lora_scale(std::max<int64_t>(mo.rank, 1), mo.alpha, mo.rslora);
  const std::vector<std::string> datasets = reader.datasets("/model");
  const auto has = [&](const std::string& path) {
    return std::find(datasets.begin(), datasets.end(), "/model/" + path) != datasets.end();
  };
  // An adapter on the untied head as well can run neither way: say so, not "run it beside".
  const bool head = merge.count("head") > 0;
  for (const auto& [matrix, f] : merge) {
    std::string path = matrix;
    std::replace(path.begin(), path.end(), '.', '/');
    SHAMN_INPUT_CHECK(!has(path + "/values"), "--merge: '", mo.checkpoint, "' adapts '", matrix,
                      "', a block-sparse matrix: merged, it would be dense. ",
                      head
                          ? "It also adapts the untied head, which the runtime cannot run beside the base: "
                            "train adapters on one kind or the other"
                          : "Run that adapter beside the base (export it with --base alone, then --adapter)");
    SHAMN_INPUT_CHECK(has(path + "/weight"), "--merge: '", mo.checkpoint, "' adapts '", matrix,
                      "', which base '", checkpoint, "' has no dense weight for");
  }
  std::map<std::string, Tensor> source;  // as trained (and merged), for the file's source_id
  for (const std::string& dataset : datasets) {
    const std::string name = spec_name(dataset);
    Tensor t = reader.read_tensor(dataset);
    if (ends_with(name, ".weight"))
      if (const auto f = merge.find(name.substr(0, name.size() - std::strlen(".weight"))); f != merge.end())
        t = fold_low_rank(t, f->second, scale,
                          "--merge: '" + mo.checkpoint + "' into '" + checkpoint + "', '" + f->first + "'");
    source.emplace(name, t);
    const ShqDType dtype = export_dtype(name, options.quant, config);
    SHAMN_INPUT_CHECK(t.dtype() == (dtype == ShqDType::i32 ? DType::i32 : DType::f32), "'", checkpoint,
                      "': tensor '", name, "' is ", t.str(), ", expected ",
                      dtype == ShqDType::i32 ? "int32" : "float32");
    check_exportable(t, name, checkpoint);
    if (t.dim() == 4 && ends_with(name, ".values")) t = block_rows_major(t);
    writer.add(name, dtype, t.shape(), shq_tensor_data(t, dtype));
  }
  writer.set_source_id(named_tensors_crc32(source));
  std::vector<uint8_t> image = writer.image();
  InferModel check(ShqFile::from_bytes(image.data(), image.size(), checkpoint + " (exported)"));
  return image;
}

uint32_t checkpoint_source_id(const std::string& checkpoint) {
  const Hdf5Reader reader(checkpoint);
  std::map<std::string, Tensor> tensors;
  for (const std::string& dataset : reader.datasets("/model"))
    tensors.emplace(spec_name(dataset), reader.read_tensor(dataset));
  return named_tensors_crc32(tensors);
}

std::vector<uint8_t> export_adapter_image(const std::string& adapter_checkpoint, const AdapterExport& a) {
  SHAMN_INPUT_CHECK(a.quant != ShqQuant::int4, "--quant int4: adapters export as f32 or int8");
  const Hdf5Reader reader(adapter_checkpoint);
  const std::map<std::string, LowRankFactors> factors = read_low_rank_factors(reader, a.rank);
  SHAMN_INPUT_CHECK(
      !factors.count("head"), "'", adapter_checkpoint,
      "' adapts the untied head, which the runtime does not run adapters on yet: fold it into the "
      "base with --merge");
  ShqWriter writer(a.quant, lora_config_toml(a.rank, a.alpha, a.rslora), "", training_step(reader));
  writer.set_source_id(a.base_id);
  // int8 quantises A [r, in] only: B [out, r] has rows of r values, which q8
  // blocks of 32 would pad (4x at rank 8), and the runtime keeps it as f32.
  const ShqDType a_dtype = a.quant == ShqQuant::int8 ? ShqDType::q8_0x16 : ShqDType::f32;
  for (const auto& [matrix, f] : factors) {
    writer.add(matrix + ".lora_a", a_dtype, f.a.shape(), shq_tensor_data(f.a, a_dtype));
    writer.add(matrix + ".lora_b", ShqDType::f32, f.b.shape(), shq_tensor_data(f.b, ShqDType::f32));
  }
  return writer.image();
}

void export_model(const std::string& checkpoint, const ExportOptions& options, const std::string& out) {
  const std::vector<uint8_t> image = export_model_image(checkpoint, options);
  AtomicFile file(out, "shq");
  file.write(image.data(), image.size());
  file.commit();
}

}  // namespace shamn
