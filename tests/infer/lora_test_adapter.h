#pragma once
// LoRA adapter files for runtime tests: random factors for any set of a
// model's adaptable matrices, written as the adapter file export writes.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "infer/export_model.h"
#include "infer/infer_model.h"
#include "infer/lora_adapter.h"
#include "infer/shq_writer.h"

namespace shamn::test {

// The [out, in] shape of every matrix an adapter of this config may adapt.
inline std::map<std::string, std::pair<int64_t, int64_t>> adaptable(const ModelConfig& c) {
  std::map<std::string, std::pair<int64_t, int64_t>> m;
  const MoeOptions mo = c.moe();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string q = "layers." + std::to_string(l) + ".";
    m[q + "mixer.out"] = {c.dim, c.dim};
    if (c.has_memory(l)) m[q + "memory.query"] = {c.memory().key_dim, c.dim};
    m[q + "moe.router_group"] = {mo.groups, c.dim};
    m[q + "moe.router_expert"] = {mo.experts(), c.dim};
    for (int64_t e = 0; e < mo.experts(); ++e) {
      const std::string x = q + "moe.experts." + std::to_string(e) + ".";
      m[x + "up"] = {mo.up.out, mo.up.in};
      m[x + "down"] = {mo.down.out, mo.down.in};
    }
  }
  return m;
}

struct Spec {
  int64_t rank = 4;
  double alpha = 8.0;
  bool q8 = false;
  bool zero_b = false;
  uint64_t seed = 1;
  std::vector<std::string> matrices;  // empty: every adaptable one
};

// The factors a spec gives a matrix: A, B ~ U(-0.5, 0.5) per name (B zero if asked).
inline std::pair<Tensor, Tensor> factors(const Spec& s, const std::string& matrix, int64_t out, int64_t in) {
  Tensor a = Tensor::empty({s.rank, in}), b = Tensor::zeros({out, s.rank});
  Rng ra(s.seed, std::hash<std::string>{}(matrix + ".lora_a"));
  ra.fill_uniform(a, -0.5, 0.5);
  if (!s.zero_b) {
    Rng rb(s.seed, std::hash<std::string>{}(matrix + ".lora_b"));
    rb.fill_uniform(b, -0.5, 0.5);
  }
  return {a, b};
}

inline std::vector<uint8_t> adapter_image(const ModelConfig& c, uint64_t base_id, const Spec& s) {
  ShqWriter w(s.q8 ? ShqQuant::int8 : ShqQuant::f32, lora_config_toml(s.rank, s.alpha), "", 0);
  w.set_source_id(base_id);
  for (const auto& [matrix, shape] : adaptable(c)) {
    if (!s.matrices.empty() && std::find(s.matrices.begin(), s.matrices.end(), matrix) == s.matrices.end())
      continue;
    const auto [a, b] = factors(s, matrix, shape.first, shape.second);
    const ShqDType dt = s.q8 ? ShqDType::q8_0x16 : ShqDType::f32;
    w.add(matrix + ".lora_a", dt, a.shape(), shq_tensor_data(a, dt));
    w.add(matrix + ".lora_b", dt, b.shape(), shq_tensor_data(b, dt));
  }
  return w.image();
}

inline LoraAdapter load_adapter(const InferModel& base, const Spec& s, uint64_t base_id = 0) {
  const std::vector<uint8_t> im =
      adapter_image(base.config(), base_id ? base_id : base.file().header().source_id(), s);
  return LoraAdapter(ShqFile::from_bytes(im.data(), im.size(), "adapter.shq"), base);
}

}  // namespace shamn::test
