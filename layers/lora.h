#pragma once
// LoRA (Hu et al., 2021): a frozen base layer y = W x (+ bias) fine-tuned through
// a low-rank adapter beside it, y = W x + (alpha / rank) * B (A x) (with
// `rslora`, rank-stabilised LoRA, Kalajdzievski 2023: alpha / sqrt(rank)), with
// A [rank, in] random and B [out, rank] zero at the start, so an adapted model
// starts exactly where its base was. Adapters attach to the layers that own a
// weight matrix (Linear, BlockSparseLinear) and register as that layer's
// parameters `lora_a` and `lora_b`: "layers.3.mixer.out.lora_a".
//
// Which layers get one is a list of patterns over module names
// ("layers.*.mixer.out", "layers.*.moe.experts.*.up"), where `*` stands for any
// run of characters within one dotted component (so `layers.*` matches
// "layers.3" but not "layers.3.mixer").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops_dropout.h"
#include "autograd/ops_lora.h"
#include "core/lora_scale.h"
#include "core/model_config.h"
#include "layers/module.h"

namespace shamn {

struct LoraOptions {
  int64_t rank = 0;  // 0 = no adapters
  double alpha = 0;  // the adapter's output is scaled by alpha / rank
  std::vector<std::string> targets;
  // Scale by alpha / sqrt(rank) instead: a rank's best learning rate then
  // barely moves with the rank (experiments/lora.md).
  bool rslora = false;
  // Probability that dropout zeroes an element of an adapter's input while
  // training, in [0, 1).
  double dropout = 0;
  bool enabled() const { return rank > 0; }
  double scale() const { return lora_scale(rank, alpha, rslora); }
};

// A layer that can take an adapter: it knows its in/out widths and adds the
// adapter's output to its own.
class LoraHost : public Module {
 public:
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  // Registers lora_a [rank, in] and lora_b [out, rank] (zero until init_lora()).
  void add_lora(int64_t rank, double alpha, bool rslora = false);
  bool has_lora() const { return adapter_.a.defined(); }
  const LowRankOperands& lora() const { return adapter_; }
  double lora_scale() const { return scale_; }
  // A ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform_(a=sqrt(5)), as
  // PEFT's LoRA) from A's own Philox stream (layers/init.h), B = 0.
  void init_lora(uint64_t seed, const std::string& prefix);

  // LoRA dropout with probability p; `name` (the layer's dotted name) keys its masks.
  void set_lora_dropout(double p, const std::string& name);
  double lora_dropout() const { return dropout_; }
  // The masks of pass `pass` of the run seeded `seed` from now on, until the end.
  void begin_lora_dropout_pass(uint64_t seed, uint64_t pass);
  void end_lora_dropout_pass() { pass_.reset(); }
  const std::optional<DropoutKey>& lora_dropout_key() const { return pass_; }
  // What the adapter reads: dropout(x) inside a LoraDropoutPass, x otherwise.
  Var lora_input(const Var& x) const;

 protected:
  LoraHost(int64_t in, int64_t out) : in_(in), out_(out) {}
  // y + scale * B (A x) over the rows of x ([..., in] -> y's [..., out]), summed
  // in y's storage (y is this layer's own output); y as it is without an adapter.
  Var add_lora_output(const Var& x, const Var& y) const;
  // Module::init() of a host: initialise the adapter too, when there is one.
  void init_lora_if_any(uint64_t seed, const std::string& prefix) {
    if (has_lora()) init_lora(seed, prefix);
  }

 private:
  int64_t in_, out_;
  LowRankOperands adapter_;
  double scale_ = 0;
  double dropout_ = 0;
  uint64_t dropout_stream_ = 0;     // FNV-1a of "<name>.lora_dropout"
  std::optional<DropoutKey> pass_;  // the current pass's key; nullopt: no dropout
};

// Turns LoRA dropout on in every adapted layer of `model` (those with
// lora.dropout > 0) for the forward passes made while it lives, with the masks
// of pass `pass` of the run seeded `seed`. The trainer numbers its passes by
// micro-batch over the run (step * grad_accum + micro-batch), so a rank draws
// the masks one process would draw for the same micro-batch, at any rank count.
// The backward pass needs none of it: each dropout node keeps its key.
class LoraDropoutPass {
 public:
  LoraDropoutPass(Module& model, uint64_t seed, uint64_t pass);
  ~LoraDropoutPass();
  LoraDropoutPass(const LoraDropoutPass&) = delete;
  LoraDropoutPass& operator=(const LoraDropoutPass&) = delete;

 private:
  std::vector<LoraHost*> hosts_;
};

// `*` matches any run of characters other than '.'; everything else itself.
bool lora_pattern_matches(const std::string& pattern, const std::string& name);

// The modules of a model with this config that can take an adapter, in
// named_parameters() order: "layers.0.mixer.out", "layers.1.memory.query", ...
std::vector<std::string> lora_host_names(const ModelConfig& config);

// The host names the targets select, in model order. A pattern that is empty,
// holds characters other than [A-Za-z0-9_.*], or matches no host is a
// ConfigError for "lora.targets" that lists what can be targeted.
std::vector<std::string> select_lora_hosts(const std::vector<std::string>& targets,
                                           const ModelConfig& config);

// Adds an adapter to every selected host of `model` (built from `config`).
void attach_lora(Module& model, const ModelConfig& config, const LoraOptions& options);

// "....lora_a" or "....lora_b".
bool is_lora_parameter(const std::string& name);
std::vector<NamedVar> lora_parameters(const Module& model);
// Stops gradients for every parameter that is not an adapter's.
void freeze_base(Module& model);
// Initialises every adapter of `model` (and nothing else).
void init_lora_adapters(Module& model, uint64_t seed);

// The identity of a base model: CRC-32 over every tensor that is not an
// adapter's (parameters and buffers), in name order, each as its dotted name, a
// NUL, its dtype name, a NUL, its dims as little-endian int64 and its bytes.
uint32_t base_checksum(const Module& model);  // core/tensor_checksum.h over those tensors

}  // namespace shamn
