#include "core/model_config.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/config_table.h"

namespace shamn {

namespace {
// SPEC: round() rounds halves away from zero. Saturates (NaN gives 0): a config
// value may be anything, and casting an out-of-range double is undefined.
int64_t round_half_away(double x) {
  const double r = std::round(x);
  if (!(r == r)) return 0;
  if (r >= 0x1p63) return std::numeric_limits<int64_t>::max();
  if (r < -0x1p63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(r);
}

// a * b for a, b >= 1, saturating: for bounds and messages built from config values.
int64_t product_or_max(int64_t a, int64_t b) {
  int64_t out;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

void check_sparsity(double s, const std::string& key) {
  SHAMN_CONFIG_CHECK(s >= 0.0 && s < 1.0, key, key, " must lie in [0, 1), got ", s);
}

// Far above any model SHAMN is meant for, far below where the sizes formed from
// these keys overflow: a typo of a few digits is named here, not as an internal
// tensor-size check or an allocation of petabytes.
void check_at_most(int64_t v, int64_t max, const char* key) {
  SHAMN_CONFIG_CHECK(v <= max, key, key, " must be <= ", max, ", got ", v);
}
}  // namespace

void EmbedOptions::validate() const {
  SHAMN_CONFIG_CHECK(vocab_size >= 1, "model.vocab_size", "model.vocab_size must be >= 1, got ", vocab_size);
  check_sparsity(sparsity, "model.embed.sparsity");
  if (buckets_derived)  // the user wrote the sparsity (or nothing), not buckets
    SHAMN_CONFIG_CHECK(buckets >= 1, "model.embed.sparsity",
                       "model.embed.sparsity leaves round(model.vocab_size ", vocab_size,
                       " x (1 - sparsity)) = ", buckets,
                       " hash buckets: set model.embed.buckets, or a lower sparsity");
  SHAMN_CONFIG_CHECK(buckets >= 1, "model.embed.buckets", "model.embed.buckets must be >= 1, got ", buckets);
  SHAMN_CONFIG_CHECK(hashes >= 1, "model.embed.hashes", "model.embed.hashes must be >= 1, got ", hashes);
  check_at_most(buckets, int64_t{1} << 26, "model.embed.buckets");
  check_at_most(hashes, 64, "model.embed.hashes");
}

int64_t BlockSparseOptions::active_blocks() const {
  const int64_t input_blocks = in / block;
  return std::max<int64_t>(1, round_half_away((1.0 - sparsity) * static_cast<double>(input_blocks)));
}

void BlockSparseOptions::validate() const {
  SHAMN_CONFIG_CHECK(block >= 1, "model.sparse.block", "model.sparse.block must be >= 1, got ", block);
  SHAMN_CONFIG_CHECK(in % block == 0 && out % block == 0, "model.sparse.block",
                     "model.sparse.block = ", block, " must divide the layer's dims ", out, "x", in,
                     " (model.dim and model.moe.hidden must be multiples of the block)");
  check_sparsity(sparsity, sparsity_key);
}

void MixerOptions::validate() const {
  SHAMN_CONFIG_CHECK(kernel >= 1, "model.mixer.kernel", "model.mixer.kernel must be >= 1, got ", kernel);
  check_at_most(kernel, 4096, "model.mixer.kernel");
  out.validate();
}

int64_t MemoryOptions::sqrt_size() const {
  // A size < 1 has no root slots (and sqrt of a negative is NaN): validate() rejects it.
  if (size < 1) return 0;
  int64_t n = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(size))));
  // n * n > size, without forming a product that overflows near INT64_MAX.
  while (n > size / n) --n;
  while (n + 1 <= size / (n + 1)) ++n;
  return n;
}

void MemoryOptions::validate() const {
  const int64_t n = sqrt_size();
  SHAMN_CONFIG_CHECK(size >= 1 && n * n == size, "model.memory.size",
                     "model.memory.size must be a perfect square (n^2 slots), got ", size);
  SHAMN_CONFIG_CHECK(topk >= 1 && topk <= n, "model.memory.topk", "model.memory.topk must lie in [1, ", n,
                     "] (sqrt of model.memory.size), got ", topk);
  if (key_dim_derived)
    SHAMN_CONFIG_CHECK(key_dim >= 2, "model.dim", "model.memory.key_dim defaults to model.dim / 2 (even), ",
                       key_dim, " here: set model.memory.key_dim (even, >= 2)");
  SHAMN_CONFIG_CHECK(key_dim >= 2 && key_dim % 2 == 0, "model.memory.key_dim",
                     "model.memory.key_dim must be even and >= 2, got ", key_dim);
  check_at_most(size, int64_t{1} << 26, "model.memory.size");
  check_at_most(key_dim, int64_t{1} << 14, "model.memory.key_dim");
}

void MoeOptions::validate() const {
  SHAMN_CONFIG_CHECK(groups >= 1, "model.moe.groups", "model.moe.groups must be >= 1, got ", groups);
  SHAMN_CONFIG_CHECK(experts_per_group >= 1, "model.moe.experts_per_group",
                     "model.moe.experts_per_group must be >= 1, got ", experts_per_group);
  SHAMN_CONFIG_CHECK(group_k >= 1 && group_k <= groups, "model.moe.group_k",
                     "model.moe.group_k must lie in [1, model.moe.groups = ", groups, "], got ", group_k);
  SHAMN_CONFIG_CHECK(k >= 1 && k <= product_or_max(group_k, experts_per_group), "model.moe.k",
                     "model.moe.k must lie in [1, group_k * experts_per_group = ",
                     product_or_max(group_k, experts_per_group), "], got ", k);
  // The experts of a layer are counted, named and routed by int32 ids, one
  // parameter set each; far past any router SHAMN is meant for, this keeps
  // groups * experts_per_group from overflowing wherever it is formed.
  SHAMN_CONFIG_CHECK(product_or_max(groups, experts_per_group) <= kMaxExperts, "model.moe.experts_per_group",
                     "model.moe.groups * model.moe.experts_per_group must be at most ", kMaxExperts, ", got ",
                     groups, " * ", experts_per_group);
  SHAMN_CONFIG_CHECK(hidden >= 1, "model.moe.hidden", "model.moe.hidden must be >= 1, got ", hidden);
  check_at_most(hidden, int64_t{1} << 18, "model.moe.hidden");
  SHAMN_CONFIG_CHECK(aux_coef >= 0 && std::isfinite(aux_coef), "model.moe.aux_coef",
                     "model.moe.aux_coef must be >= 0 and finite, got ", aux_coef);
  up.validate();
  down.validate();
}

EmbedOptions ModelConfig::embed() const {
  EmbedOptions o;
  o.vocab_size = vocab_size;
  o.dim = dim;
  o.sparsity = embed_sparsity;
  o.buckets = embed_buckets ? *embed_buckets
                            : round_half_away(static_cast<double>(vocab_size) * (1.0 - embed_sparsity));
  o.buckets_derived = !embed_buckets;
  o.hashes = embed_hashes;
  o.tie_head = tie_head;
  return o;
}

MixerOptions ModelConfig::mixer() const {
  MixerOptions o;
  o.dim = dim;
  o.kernel = mixer_kernel;
  o.out = {dim,   dim,
           block, mixer_sparsity.value_or(sparsity),
           true,  mixer_sparsity ? "model.mixer.sparsity" : "model.sparse.sparsity"};
  return o;
}

MemoryOptions ModelConfig::memory() const {
  MemoryOptions o;
  o.dim = dim;
  o.size = memory_size;
  o.topk = memory_topk;
  o.key_dim = memory_key_dim ? *memory_key_dim : (dim / 2) / 2 * 2;
  o.key_dim_derived = !memory_key_dim;
  return o;
}

MoeOptions ModelConfig::moe() const {
  MoeOptions o;
  o.dim = dim;
  o.groups = moe_groups;
  o.experts_per_group = moe_experts_per_group;
  o.group_k = moe_group_k;
  o.k = moe_k;
  o.hidden = moe_hidden.value_or(dim);
  o.aux_coef = moe_aux_coef;
  const double s = moe_sparsity.value_or(sparsity);
  const char* key = moe_sparsity ? "model.moe.sparsity" : "model.sparse.sparsity";
  o.up = {dim, o.hidden, block, s, true, key};
  o.down = {o.hidden, dim, block, s, true, key};
  return o;
}

std::vector<int64_t> ModelConfig::resolved_memory_layers() const {
  return memory_layers ? *memory_layers : std::vector<int64_t>{n_layers / 2};
}

bool ModelConfig::has_memory(int64_t layer) const {
  for (int64_t l : resolved_memory_layers())
    if (l == layer) return true;
  return false;
}

void ModelConfig::validate() const {
  SHAMN_CONFIG_CHECK(vocab_size >= 2, "model.vocab_size", "model.vocab_size must be >= 2, got ", vocab_size);
  SHAMN_CONFIG_CHECK(vocab_size <= kMaxVocabSize, "model.vocab_size",
                     "model.vocab_size must be <= ", kMaxVocabSize, " (2^24), got ", vocab_size);
  SHAMN_CONFIG_CHECK(dim >= 1, "model.dim", "model.dim must be >= 1, got ", dim);
  check_at_most(dim, int64_t{1} << 16, "model.dim");
  SHAMN_CONFIG_CHECK(n_layers >= 1, "model.n_layers", "model.n_layers must be >= 1, got ", n_layers);
  check_at_most(n_layers, 1024, "model.n_layers");
  check_sparsity(sparsity, "model.sparse.sparsity");
  embed().validate();
  mixer().validate();
  moe().validate();
  const auto layers = resolved_memory_layers();
  std::set<int64_t> seen;
  for (int64_t l : layers) {
    SHAMN_CONFIG_CHECK(l >= 0 && l < n_layers, "model.memory.layers", "model.memory.layers entry ", l,
                       " is not a layer index in [0, ", n_layers, ")");
    SHAMN_CONFIG_CHECK(seen.insert(l).second, "model.memory.layers", "model.memory.layers lists layer ", l,
                       " twice");
  }
  // Checked with no memory layer too, as SPEC 5 and the PyTorch reference do: the
  // values are written into every checkpoint's config.
  memory().validate();
}

const std::set<std::string>& ModelConfig::known_keys() {
  static const std::set<std::string> known = {"model",
                                              "model.vocab_size",
                                              "model.dim",
                                              "model.n_layers",
                                              "model.embed",
                                              "model.embed.buckets",
                                              "model.embed.sparsity",
                                              "model.embed.hashes",
                                              "model.embed.tie_head",
                                              "model.sparse",
                                              "model.sparse.block",
                                              "model.sparse.sparsity",
                                              "model.mixer",
                                              "model.mixer.kernel",
                                              "model.mixer.sparsity",
                                              "model.memory",
                                              "model.memory.layers",
                                              "model.memory.size",
                                              "model.memory.topk",
                                              "model.memory.key_dim",
                                              "model.moe",
                                              "model.moe.groups",
                                              "model.moe.experts_per_group",
                                              "model.moe.group_k",
                                              "model.moe.k",
                                              "model.moe.hidden",
                                              "model.moe.sparsity",
                                              "model.moe.aux_coef"};
  return known;
}

ModelConfig ModelConfig::from_table(const ConfigTable& t) {
  SHAMN_INPUT_CHECK(t.has("model"), t.origin(), ": the config has no [model] table");
  t.reject_unknown("model", known_keys());

  auto required = [&](const std::string& key) {
    auto v = t.get_int(key);
    SHAMN_INPUT_CHECK(v.has_value(), t.origin(), ": missing required key '", key, "'");
    return *v;
  };
  ModelConfig c;
  c.vocab_size = required("model.vocab_size");
  c.dim = required("model.dim");
  c.n_layers = required("model.n_layers");
  c.embed_buckets = t.get_int("model.embed.buckets");
  c.embed_sparsity = t.get_float("model.embed.sparsity").value_or(c.embed_sparsity);
  c.embed_hashes = t.get_int("model.embed.hashes").value_or(c.embed_hashes);
  c.tie_head = t.get_bool("model.embed.tie_head").value_or(c.tie_head);
  c.block = t.get_int("model.sparse.block").value_or(c.block);
  c.sparsity = t.get_float("model.sparse.sparsity").value_or(c.sparsity);
  c.mixer_kernel = t.get_int("model.mixer.kernel").value_or(c.mixer_kernel);
  c.mixer_sparsity = t.get_float("model.mixer.sparsity");
  c.memory_layers = t.get_int_array("model.memory.layers");
  c.memory_size = t.get_int("model.memory.size").value_or(c.memory_size);
  c.memory_topk = t.get_int("model.memory.topk").value_or(c.memory_topk);
  c.memory_key_dim = t.get_int("model.memory.key_dim");
  c.moe_groups = t.get_int("model.moe.groups").value_or(c.moe_groups);
  c.moe_experts_per_group = t.get_int("model.moe.experts_per_group").value_or(c.moe_experts_per_group);
  c.moe_group_k = t.get_int("model.moe.group_k").value_or(c.moe_group_k);
  c.moe_k = t.get_int("model.moe.k").value_or(c.moe_k);
  c.moe_hidden = t.get_int("model.moe.hidden");
  c.moe_sparsity = t.get_float("model.moe.sparsity");
  c.moe_aux_coef = t.get_float("model.moe.aux_coef").value_or(c.moe_aux_coef);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), t.where(e.key()) + ": " + e.what());
  }
  return c;
}

ModelConfig ModelConfig::from_toml(const std::string& text, const std::string& origin) {
  return from_table(ConfigTable::parse(text, origin));
}

std::string ModelConfig::to_toml() const {
  const EmbedOptions e = embed();
  const MixerOptions mx = mixer();
  const MemoryOptions mem = memory();
  const MoeOptions mo = moe();
  std::ostringstream out;
  const auto f = toml_float;
  out << "[model]\nvocab_size = " << vocab_size << "\ndim = " << dim << "\nn_layers = " << n_layers
      << "\n\n[model.embed]\nbuckets = " << e.buckets << "\nsparsity = " << f(e.sparsity)
      << "\nhashes = " << e.hashes << "\ntie_head = " << (e.tie_head ? "true" : "false")
      << "\n\n[model.sparse]\nblock = " << block << "\nsparsity = " << f(sparsity)
      << "\n\n[model.mixer]\nkernel = " << mx.kernel << "\nsparsity = " << f(mx.out.sparsity)
      << "\n\n[model.memory]\nlayers = [";
  const auto layers = resolved_memory_layers();
  for (size_t i = 0; i < layers.size(); ++i) out << (i ? ", " : "") << layers[i];
  out << "]\nsize = " << mem.size << "\ntopk = " << mem.topk << "\nkey_dim = " << mem.key_dim
      << "\n\n[model.moe]\ngroups = " << mo.groups << "\nexperts_per_group = " << mo.experts_per_group
      << "\ngroup_k = " << mo.group_k << "\nk = " << mo.k << "\nhidden = " << mo.hidden
      << "\nsparsity = " << f(mo.up.sparsity) << "\naux_coef = " << f(mo.aux_coef) << "\n";
  return out.str();
}

}  // namespace shamn
