#pragma once
// The inference-only SHAMN forward (no autograd, no training graph): it reads
// the weights in place from a mapped .shq file and shares the core's kernels
// (norms, activations, routing, product-key selection) with training.
//
// The only token mixing in SHAMN is each layer's causal convolution over the
// last K mixer inputs, so a sequence's whole state is, per layer, the last K-1
// normalised mixer inputs (DecodeState). forward() runs n new tokens after
// that history: n = prompt length is a batched prefill (weights stream once
// for all n tokens), n = 1 is a decode step whose cost does not depend on how
// long the context already is.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "data/tokenizer.h"
#include "infer/shq_file.h"
#include "infer/weight_matrix.h"

namespace shamn {

class LoraAdapter;

struct DecodeState {
  // Per layer: the last K-1 normalised mixer inputs, [K-1, D], oldest first;
  // zeros before the sequence starts (the SPEC's zero padding).
  std::vector<std::vector<float>> history;
  int64_t position = 0;  // tokens seen so far
};

// The normalised mixer inputs of the tokens a stream ran since `clear()`, per
// layer [tokens, D]: with the state from before those tokens they give the
// state after any prefix of them (InferModel::rewind), which is how a
// speculative decoder drops the tokens its target rejected.
struct MixerInputs {
  std::vector<std::vector<float>> layers;
  void clear() {
    for (std::vector<float>& rows : layers) rows.clear();
  }
};

// Sees each layer's sparse choices as the forward makes them, for `shamn
// analyze` on a model file. Rows are the stream's tokens in order.
class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  // slots, weights: [n, topk], best first; weights are the softmax of the scores.
  virtual void memory_reads(int64_t layer, const int32_t* slots, const float* weights, int64_t n) = 0;
  // experts, gates: [n, k] in selection order; gates normalised over the k.
  virtual void moe_choices(int64_t layer, const int32_t* experts, const float* gates, int64_t n) = 0;
};

// One sequence's part of a batched forward: n new tokens after `state`.
struct StreamStep {
  DecodeState* state = nullptr;
  const int32_t* tokens = nullptr;  // [n]
  int64_t n = 0;
  bool all_logits = false;               // logits for every token, else for the last one only
  MixerInputs* record = nullptr;         // if set, the n tokens' mixer inputs are appended to it
  const LoraAdapter* adapter = nullptr;  // if set, this stream's rows run with it (infer/lora_adapter.h)
  RoutingObserver* observer = nullptr;   // if set (a forward of this one stream only), told every choice
};

class InferModel {
 public:
  // Checks every tensor against the config (name, dtype, shape, index ranges);
  // an InputError names the file and tensor.
  explicit InferModel(ShqFile file);
  InferModel(InferModel&&) noexcept;
  ~InferModel();

  const ModelConfig& config() const { return config_; }
  const ShqFile& file() const { return file_; }
  // The embedded tokenizer, if the file has one.
  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  DecodeState new_state() const;

  // tokens: [n] ids < vocab_size. Runs them after `state`'s history and advances it.
  // logits: [n, V] when all_logits, else [V] for the last token only.
  // adapter: a LoRA adapter for this model's base (null: the bare base).
  void forward(const int32_t* tokens, int64_t n, DecodeState& state, float* logits, bool all_logits,
               const LoraAdapter* adapter = nullptr) const;
  // Many sequences in one pass over the weights: every step's tokens after its
  // own state (states distinct). Each stream gets bitwise the logits it would
  // get alone: apart from the mixer's convolution over its own history, every
  // row is computed independently of the others. logits: the rows the steps
  // ask for, step by step, [sum of (all_logits ? n : 1), V]; null runs no head.
  void forward(std::span<const StreamStep> steps, float* logits) const;
  // Each position's cross-entropy against targets [n] (the next tokens), in nats:
  // losses[t] = logsumexp(logits[t]) - logits[t][targets[t]]. The tied head runs
  // training's fused loss kernel over 16 rows at a time and never stores the
  // [n, V] logits, which is what makes evaluation fast; the result equals
  // forward()'s logits reduced by logsumexp within float rounding (1e-5 relative).
  void forward_losses(const int32_t* tokens, int64_t n, DecodeState& state, const int32_t* targets,
                      double* losses, const LoraAdapter* adapter = nullptr) const;
  // `state` becomes the state after the first `keep` of the tokens recorded in
  // `inputs` by forwards that started from `before`: per layer the last K-1
  // rows of before's history followed by those tokens' rows. Exact (the rows
  // are the ones the forward computed), and it copies (K-1) x D floats per
  // layer instead of running any token again.
  void rewind(DecodeState& state, const DecodeState& before, const MixerInputs& inputs, int64_t keep) const;

  // Bytes of weights one decoded token reads: every matrix it touches (the
  // routed experts only, the k selected memory value rows), its biases, gains
  // and index buffers; computed from the loaded tensors.
  uint64_t weight_bytes_per_token() const;
  // Bytes of weights stored (every tensor), as the file holds them.
  uint64_t weight_bytes() const;

  struct Impl;

 private:
  ModelConfig config_;
  ShqFile file_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shamn
