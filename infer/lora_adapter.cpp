#include "infer/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/check.h"
#include "core/config_table.h"
#include "core/lora_scale.h"
#include "infer/infer_model.h"
#include "infer/quant_blocks.h"

namespace shamn {

namespace {

// One adaptable matrix of the base: where it sits and its [out, in] shape.
struct Target {
  int64_t out = 0, in = 0;
  const LoraFactors** slot = nullptr;  // in the adapter's LoraLayer
};

// The bytes of one matrix's factors as the runtime reads them (A's few-rows
// copy instead of A where `few_rows` and it has one); 0 for none.
uint64_t factor_bytes(const LoraFactors* f, bool few_rows) {
  if (f == nullptr) return 0;
  const uint64_t b = f->a.quantized()
                         ? static_cast<uint64_t>(f->bq.packed.size()) + f->bq.d.size() * sizeof(float)
                         : f->bt.size() * sizeof(float);
  const FewRowsQ8& c = f->a8;
  const uint64_t a = few_rows && c ? static_cast<uint64_t>(c.packed.size()) + c.d.size() * sizeof(float) +
                                         c.offset.size() * sizeof(int32_t)
                                   : f->a.bytes();
  return a + b;
}

}  // namespace

std::string lora_config_toml(int64_t rank, double alpha, bool rslora) {
  // rslora only when set: files of alpha / rank stay readable by runtimes from before the key.
  return "[lora]\nrank = " + std::to_string(rank) + "\nalpha = " + toml_float(alpha) + "\n" +
         (rslora ? "rslora = true\n" : "");
}

bool is_lora_config(const std::string& config_toml, const std::string& source) {
  return ConfigTable::parse(config_toml, source).has("lora");
}

LoraAdapter::LoraAdapter(ShqFile file, const InferModel& base) : file_(std::move(file)) {
  const std::string& p = file_.path();
  const std::string config = file_.config_toml();
  const ConfigTable t = ConfigTable::parse(config, p + " (embedded config)");
  SHAMN_INPUT_CHECK(t.has("lora"), "'", p, "' is not a LoRA adapter file (its config has no [lora] table)");
  t.reject_unknown("", {"lora", "lora.rank", "lora.alpha", "lora.rslora"});
  rank_ = t.get_int("lora.rank").value_or(0);
  alpha_ = t.get_float("lora.alpha").value_or(0.0);
  rslora_ = t.get_bool("lora.rslora").value_or(false);
  SHAMN_INPUT_CHECK(rank_ >= 1, "adapter '", p, "': lora.rank is ", rank_, ", must be >= 1");
  // A scale that overflows float would make every logit NaN.
  SHAMN_INPUT_CHECK(alpha_ > 0.0 && std::isfinite(static_cast<float>(lora_scale(rank_, alpha_, rslora_))),
                    "adapter '", p, "': lora.alpha is ", alpha_,
                    ", must be > 0 and give a finite float scale");

  const uint64_t want = base.file().header().source_id(), have = file_.header().source_id();
  SHAMN_INPUT_CHECK(want != 0, "base model '", base.file().path(),
                    "' does not say which checkpoint it was exported from (exported by an older shamn): "
                    "export the base again to use LoRA adapters with it");
  SHAMN_INPUT_CHECK(have == want, "adapter '", p, "' was trained on another base model than '",
                    base.file().path(), "' (base identity ", have, " in the adapter, ", want,
                    " in the base)");

  // Every matrix the base lets an adapter adapt, by name.
  const ModelConfig& c = base.config();
  const MoeOptions mo = c.moe();
  const MemoryOptions me = c.memory();
  layers_.resize(static_cast<size_t>(c.n_layers));
  std::map<std::string, Target> targets;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LoraLayer& L = layers_[l];
    const std::string q = "layers." + std::to_string(l) + ".";
    targets[q + "mixer.out"] = {c.dim, c.dim, &L.mixer_out};
    if (c.has_memory(l)) targets[q + "memory.query"] = {me.key_dim, c.dim, &L.query};
    targets[q + "moe.router_group"] = {mo.groups, c.dim, &L.router_group};
    targets[q + "moe.router_expert"] = {mo.experts(), c.dim, &L.router_expert};
    L.up.assign(static_cast<size_t>(mo.experts()), nullptr);
    L.down.assign(L.up.size(), nullptr);
    for (int64_t e = 0; e < mo.experts(); ++e) {
      const std::string x = q + "moe.experts." + std::to_string(e) + ".";
      targets[x + "up"] = {mo.up.out, mo.up.in, &L.up[e]};
      targets[x + "down"] = {mo.down.out, mo.down.in, &L.down[e]};
    }
  }

  // Each tensor is one factor of one target; both factors must be there.
  std::map<std::string, std::pair<const ShqTensor*, const ShqTensor*>> found;
  for (const ShqTensor& tensor : file_.tensors()) {
    const std::string& name = tensor.name;
    const size_t dot = name.rfind('.');
    const std::string matrix = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string factor = dot == std::string::npos ? name : name.substr(dot + 1);
    SHAMN_INPUT_CHECK(targets.count(matrix) && (factor == "lora_a" || factor == "lora_b"), "adapter '", p,
                      "': tensor '", name, "' is not the lora_a or lora_b of a matrix the base '",
                      base.file().path(), "' can adapt");
    auto& pair = found[matrix];
    (factor == "lora_a" ? pair.first : pair.second) = &tensor;
  }
  SHAMN_INPUT_CHECK(!found.empty(), "adapter '", p, "' adapts no matrix");
  factors_.reserve(found.size());
  for (const auto& [matrix, pair] : found) {
    SHAMN_INPUT_CHECK(pair.first && pair.second, "adapter '", p, "': '", matrix, "' has only its ",
                      pair.first ? "lora_a" : "lora_b");
    const Target& target = targets[matrix];
    const Shape a_shape{rank_, target.in}, b_shape{target.out, rank_};
    for (const auto& [tensor, shape] : {std::pair{pair.first, a_shape}, std::pair{pair.second, b_shape}}) {
      SHAMN_INPUT_CHECK(tensor->dtype == ShqDType::f32 || tensor->dtype == ShqDType::q8_0x16, "adapter '", p,
                        "': tensor '", tensor->name, "' has dtype ", shq_dtype_name(tensor->dtype),
                        "; adapters are f32 or q8_0x16");
      SHAMN_INPUT_CHECK(tensor->shape == shape, "adapter '", p, "': tensor '", tensor->name, "' has shape ",
                        shape_str(tensor->shape), " but rank ", rank_, " and the base's '", matrix,
                        "' imply ", shape_str(shape));
    }
    // B is small ([out, r]): kept as f32 columns (r axpys add B t to a row)
    // beside a f32 A; beside a quantised A, quantised per output row and
    // packed for its shape (infer/low_rank_q8.h).
    const WeightMatrix b = weight_matrix_view(pair.second->dtype, b_shape, pair.second->data);
    std::vector<float> bt(static_cast<size_t>(rank_ * target.out)), row(static_cast<size_t>(rank_));
    for (int64_t o = 0; o < target.out; ++o) {
      std::fill(row.begin(), row.end(), 0.0f);
      b.add_row(o, 1.0f, row.data());
      for (int64_t k = 0; k < rank_; ++k) bt[k * target.out + o] = row[k];
    }
    const WeightMatrix a = weight_matrix_view(pair.first->dtype, a_shape, pair.first->data);
    LoraFactors f{a, {}, {}, static_cast<float>(lora_scale(rank_, alpha_, rslora_)), {}};
    if (a.quantized()) {
      std::vector<BlockQ8> b_rows(static_cast<size_t>(target.out * quant_blocks(rank_)));
      std::vector<float> row_f(static_cast<size_t>(rank_));
      for (int64_t o = 0; o < target.out; ++o) {
        for (int64_t k = 0; k < rank_; ++k) row_f[k] = bt[k * target.out + o];
        quantize_row_q8(row_f.data(), b_rows.data() + o * quant_blocks(rank_), rank_);
      }
      f.bq = pack_low_rank_q8(b_rows.data(), target.out, rank_);
      if (rank_ <= FewRowsQ8::kMaxRows && a.tiled)
        f.a8 = pack_few_rows_q8(static_cast<const TileQ8*>(a.data), rank_, a.blocks_per_row());
    } else {
      f.bt = std::move(bt);
    }
    factors_.push_back(std::move(f));
    *target.slot = &factors_.back();
  }

  // The few-rows copy is read where the base's products hand the term whole
  // quantised rows: beside a quantised base only, and for a block-sparse matrix
  // only at blocks of whole q8 blocks (model_products.cpp's whole_blocks).
  const bool quantised_base = base.file().header().quant != static_cast<uint32_t>(ShqQuant::f32);
  const bool sparse_rows_whole = base.config().block % kQuantBlock == 0;
  for (const bool few_rows : {false, true}) {
    const bool copy = few_rows && quantised_base, sparse_copy = copy && sparse_rows_whole;
    double per_token = 0;
    for (const LoraLayer& L : layers_) {
      per_token += static_cast<double>(factor_bytes(L.mixer_out, sparse_copy));
      for (const LoraFactors* f : {L.query, L.router_group, L.router_expert})
        per_token += static_cast<double>(factor_bytes(f, copy));
      for (size_t e = 0; e < L.up.size(); ++e)
        per_token +=
            static_cast<double>(mo.k) / static_cast<double>(L.up.size()) *
            static_cast<double>(factor_bytes(L.up[e], sparse_copy) + factor_bytes(L.down[e], sparse_copy));
    }
    (few_rows ? bytes_few_rows_ : bytes_stored_) = static_cast<uint64_t>(per_token + 0.5);
  }
}

uint64_t LoraAdapter::weight_bytes() const {
  uint64_t b = 0;
  for (const ShqTensor& t : file_.tensors()) b += t.bytes;
  return b;
}

}  // namespace shamn
