#include "layers/lora.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>
#include <string_view>

#include "autograd/ops.h"
#include "core/check.h"
#include "core/checksum.h"
#include "core/rng.h"
#include "core/tensor_checksum.h"
#include "layers/init.h"

namespace shamn {

void LoraHost::add_lora(int64_t rank, double alpha, bool rslora) {
  SHAMN_CHECK(!has_lora(), "this layer already has a LoRA adapter");
  SHAMN_CHECK(rank >= 1, "LoRA rank must be >= 1, got ", rank);
  adapter_.a = register_parameter("lora_a", Tensor::zeros({rank, in_}));
  adapter_.b = register_parameter("lora_b", Tensor::zeros({out_, rank}));
  scale_ = shamn::lora_scale(rank, alpha, rslora);
}

void LoraHost::init_lora(uint64_t seed, const std::string& prefix) {
  SHAMN_CHECK(has_lora(), "init_lora: '", prefix, "' has no adapter");
  Tensor a = adapter_.a.value(), b = adapter_.b.value();
  init_uniform(a, seed, prefix + "lora_a", 1.0 / std::sqrt(static_cast<double>(in_)));
  b.zero();
}

void LoraHost::set_lora_dropout(double p, const std::string& name) {
  SHAMN_CHECK(p >= 0 && p < 1, "LoRA dropout must lie in [0, 1), got ", p);
  dropout_ = p;
  dropout_stream_ = tensor_rng(0, name + ".lora_dropout").stream();
}

void LoraHost::begin_lora_dropout_pass(uint64_t seed, uint64_t pass) {
  // A seed of its own for every pass, drawn from the run's seed, so passes'
  // masks share no Philox blocks; the layer's stream tells layers apart.
  const std::array<uint32_t, 4> w = philox4x32(pass, 0x4c6f5241ull /* "LoRA" */, seed);
  pass_ = DropoutKey{(static_cast<uint64_t>(w[0]) << 32) | w[1], dropout_stream_};
}

Var LoraHost::lora_input(const Var& x) const {
  return pass_ && dropout_ > 0 ? dropout(x, dropout_, *pass_) : x;
}

Var LoraHost::add_lora_output(const Var& x, const Var& y) const {
  if (!has_lora()) return y;
  const int64_t rows = x.numel() / in_;
  const Var sum = add_low_rank_segments(reshape(y, {rows, out_}), lora_input(reshape(x, {rows, in_})),
                                        {0, rows}, {adapter_}, scale_);
  return reshape(sum, y.shape());
}

LoraDropoutPass::LoraDropoutPass(Module& model, uint64_t seed, uint64_t pass) {
  std::vector<Module*> modules{&model};  // the model itself may be the one adapted layer
  for (auto& [name, m] : model.named_modules()) modules.push_back(m);
  for (Module* m : modules)
    if (auto* host = dynamic_cast<LoraHost*>(m); host && host->has_lora() && host->lora_dropout() > 0) {
      host->begin_lora_dropout_pass(seed, pass);
      hosts_.push_back(host);
    }
}

LoraDropoutPass::~LoraDropoutPass() {
  for (LoraHost* host : hosts_) host->end_lora_dropout_pass();
}

namespace {
// Classic `*` wildcard matching of one component (no '.' on either side), with
// backtracking to the last `*`, which is exact when `*` may match anything.
bool component_matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string_view> components(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t dot = s.find('.', at);
    out.push_back(s.substr(at, dot == std::string_view::npos ? std::string_view::npos : dot - at));
    if (dot == std::string_view::npos) return out;
    at = dot + 1;
  }
}
}  // namespace

bool lora_pattern_matches(const std::string& pattern, const std::string& name) {
  const auto p = components(pattern), n = components(name);
  if (p.size() != n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (!component_matches(p[i], n[i])) return false;
  return true;
}

std::vector<std::string> lora_host_names(const ModelConfig& c) {
  std::vector<std::string> out;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    out.push_back(layer + "mixer.out");
    if (c.has_memory(l)) out.push_back(layer + "memory.query");
    out.push_back(layer + "moe.router_group");
    out.push_back(layer + "moe.router_expert");
    for (int64_t e = 0; e < c.moe().experts(); ++e)
      for (const char* part : {"up", "down"})
        out.push_back(layer + "moe.experts." + std::to_string(e) + "." + part);
  }
  if (!c.tie_head) out.push_back("head");
  return out;
}

std::vector<std::string> select_lora_hosts(const std::vector<std::string>& targets,
                                           const ModelConfig& config) {
  const std::vector<std::string> hosts = lora_host_names(config);
  const std::string what =
      "; adapters go on layers with a weight matrix: layers.N.mixer.out, layers.N.memory.query (memory "
      "layers), layers.N.moe.router_group, layers.N.moe.router_expert, layers.N.moe.experts.E.up and "
      ".down, head (untied head only); `*` stands for one name component, e.g. layers.*.mixer.out";
  std::vector<bool> chosen(hosts.size(), false);
  for (const std::string& t : targets) {
    const bool clean = !t.empty() && std::all_of(t.begin(), t.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '*';
    });
    SHAMN_CONFIG_CHECK(clean, "lora.targets", "lora.targets: pattern \"", t,
                       "\" is empty or holds characters other than letters, digits, '_', '.' and '*'", what);
    bool any = false;
    for (size_t i = 0; i < hosts.size(); ++i)
      if (lora_pattern_matches(t, hosts[i])) chosen[i] = any = true;
    SHAMN_CONFIG_CHECK(any, "lora.targets", "lora.targets: pattern \"", t,
                       "\" matches no layer of this model", what);
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < hosts.size(); ++i)
    if (chosen[i]) out.push_back(hosts[i]);
  return out;
}

void attach_lora(Module& model, const ModelConfig& config, const LoraOptions& options) {
  const std::vector<std::string> names = select_lora_hosts(options.targets, config);
  std::map<std::string, Module*> modules;
  for (auto& [name, m] : model.named_modules()) modules[name] = m;
  for (const std::string& name : names) {
    const auto it = modules.find(name);
    auto* host = it == modules.end() ? nullptr : dynamic_cast<LoraHost*>(it->second);
    SHAMN_CHECK(host, "attach_lora: the model has no adaptable layer '", name, "'");
    host->add_lora(options.rank, options.alpha, options.rslora);
    host->set_lora_dropout(options.dropout, name);
  }
}

bool is_lora_parameter(const std::string& name) {
  for (const char* leaf : {"lora_a", "lora_b"}) {
    const std::string tail = std::string(".") + leaf;
    if (name == leaf ||
        (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0))
      return true;
  }
  return false;
}

std::vector<NamedVar> lora_parameters(const Module& model) {
  std::vector<NamedVar> out;
  for (NamedVar& p : model.named_parameters())
    if (is_lora_parameter(p.name)) out.push_back(std::move(p));
  return out;
}

void freeze_base(Module& model) {
  for (NamedVar& p : model.named_parameters())
    if (!is_lora_parameter(p.name)) p.var.set_requires_grad(false);
}

void init_lora_adapters(Module& model, uint64_t seed) {
  for (auto& [name, m] : model.named_modules())
    if (auto* host = dynamic_cast<LoraHost*>(m); host && host->has_lora()) host->init_lora(seed, name + ".");
}

uint32_t base_checksum(const Module& model) {
  std::map<std::string, Tensor> tensors;
  for (const NamedVar& p : model.named_parameters())
    if (!is_lora_parameter(p.name)) tensors.emplace(p.name, p.var.value());
  for (const NamedTensor& b : model.named_buffers()) tensors.emplace(b.name, b.tensor);
  return named_tensors_crc32(tensors);
}

}  // namespace shamn
