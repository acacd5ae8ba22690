#pragma once
// The model config (SPEC section 5) and the per-layer options derived from it.
// Every option knows the config key it comes from, so validation errors name the
// key, and the loader adds the file and line.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace shamn {

class ConfigTable;

struct EmbedOptions {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t buckets = 0;           // resolved: model.embed.buckets or round(V * (1 - sparsity))
  bool buckets_derived = false;  // from the sparsity: an error then names that key
  double sparsity = 0.95;
  int64_t hashes = 2;
  bool tie_head = true;
  void validate() const;
};

struct BlockSparseOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t block = 32;
  double sparsity = 0.9;
  bool bias = true;
  std::string sparsity_key = "model.sparse.sparsity";  // the key errors name
  int64_t active_blocks() const;                       // max(1, round((1 - sparsity) * in / block))
  void validate() const;
};

struct MixerOptions {
  int64_t dim = 0;
  int64_t kernel = 4;
  BlockSparseOptions out;  // D -> D
  void validate() const;
};

struct MemoryOptions {
  int64_t dim = 0;
  int64_t size = 65536;  // n^2 slots
  int64_t topk = 32;
  int64_t key_dim = 0;           // 2 * dh
  bool key_dim_derived = false;  // from model.dim: an error then says so
  int64_t sqrt_size() const;     // n
  void validate() const;
};

// The most experts a MoE layer may have (model.moe.groups * experts_per_group).
inline constexpr int64_t kMaxExperts = 65536;
// The largest vocabulary, a model's or a tokenizer's (data/tokenizer.h): token ids
// are int32 everywhere, and a head over more is gigabytes of logits a batch.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

struct MoeOptions {
  int64_t dim = 0;
  int64_t groups = 4;
  int64_t experts_per_group = 4;
  int64_t group_k = 1;
  int64_t k = 2;
  int64_t hidden = 0;
  double aux_coef = 0.01;
  BlockSparseOptions up, down;  // D -> H, H -> D
  int64_t experts() const { return groups * experts_per_group; }
  void validate() const;
};

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  // [model.embed]
  std::optional<int64_t> embed_buckets;
  double embed_sparsity = 0.95;
  int64_t embed_hashes = 2;
  bool tie_head = true;
  // [model.sparse]
  int64_t block = 32;
  double sparsity = 0.9;
  // [model.mixer]
  int64_t mixer_kernel = 4;
  std::optional<double> mixer_sparsity;
  // [model.memory]
  std::optional<std::vector<int64_t>> memory_layers;
  int64_t memory_size = 65536;
  int64_t memory_topk = 32;
  std::optional<int64_t> memory_key_dim;
  // [model.moe]
  int64_t moe_groups = 4;
  int64_t moe_experts_per_group = 4;
  int64_t moe_group_k = 1;
  int64_t moe_k = 2;
  std::optional<int64_t> moe_hidden;
  std::optional<double> moe_sparsity;
  double moe_aux_coef = 0.01;

  // Reads the [model] tables (unknown keys and wrong types are errors naming the
  // origin, line and key) and validates the result.
  static ModelConfig from_table(const ConfigTable& table);
  static ModelConfig from_toml(const std::string& text, const std::string& origin);
  static const std::set<std::string>& known_keys();  // every model.* key and table

  // Throws ConfigError naming the offending key.
  void validate() const;

  // The resolved [model] tables as TOML: every default filled in, so another
  // implementation reading it needs no defaults of its own.
  std::string to_toml() const;

  EmbedOptions embed() const;
  MixerOptions mixer() const;
  MemoryOptions memory() const;
  MoeOptions moe() const;
  std::vector<int64_t> resolved_memory_layers() const;
  bool has_memory(int64_t layer) const;
};

}  // namespace shamn
