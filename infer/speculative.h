#pragma once
// Speculative decoding of one stream (Leviathan et al. 2023, Chen et al. 2023):
// a small draft model proposes K tokens one at a time, the target model scores
// all of them in one batched pass (K+1 rows of logits), and the standard
// acceptance rule keeps a prefix of them plus one token of its own, so that
// the output has exactly the target's sampling distribution. Greedy
// (temperature 0) gives token for token the target's greedy text.
//
// Rejected tokens are dropped from the target's state with InferModel::rewind:
// the verification pass records each token's mixer inputs, and the state after
// the accepted prefix is rebuilt from them and a copy of the state before the
// pass (SHAMN's only token mixing is the causal convolution, so that is the
// whole state). The draft's state is rewound the same way.
//
// One instance per stream; the models are shared and only read.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "infer/infer_model.h"
#include "infer/sampler.h"

namespace shamn {

// An InputError naming both files unless the draft can stand in for the
// target: the same vocabulary size and, if both embed one, the same tokenizer.
void check_draft_compatible(const InferModel& target, const std::string& target_name, const InferModel& draft,
                            const std::string& draft_name);

// An InputError unless speculative decoding can serve the request: its
// acceptance rule compares the target's and the draft's whole distributions,
// which penalties and a logit bias would change round by round, and it keeps
// no log-probabilities.
void check_speculative_request(const SamplingOptions& sampling, bool logprobs);

// The token a rejected draft is replaced by: the first v whose cumulative share
// of normalize(max(0, p - q)) passes u in [0, 1), `residual` scratch. Where
// rounding leaves that residual no mass (p and q agree in every bit but at the
// rejected token) it draws from p itself; where p has none either (NaN
// logits), token 0, as the sampler gives.
int32_t draw_residual(const std::vector<double>& p, const std::vector<double>& q, double u,
                      std::vector<double>& residual);

// Largest --draft-tokens: past it the target's pass rarely keeps the tail.
inline constexpr int64_t kMaxDraftTokens = 64;

struct SpeculativeRound {
  std::vector<int32_t> tokens;  // the new tokens: the accepted drafts, then one from the target
  int64_t drafted = 0;          // tokens the draft proposed
  int64_t accepted = 0;         // of those, kept
};

class SpeculativeDecoder {
 public:
  // draft_tokens: K, the drafts per round (1..kMaxDraftTokens). target_adapter:
  // a LoRA adapter the target runs with (null: none); the draft runs without
  // one, so the output is the adapted target's and only the acceptance rate
  // feels the difference.
  SpeculativeDecoder(const InferModel& target, const InferModel& draft, const SamplingOptions& sampling,
                     int64_t draft_tokens, const LoraAdapter* target_adapter = nullptr);

  // Runs the prompt (at least one token) through both models. Call once, first.
  void start(std::span<const int32_t> prompt);
  // One round: drafts min(K, max_drafts) tokens (0: the target alone makes
  // one), verifies them in one pass and returns 1 to that + 1 tokens.
  SpeculativeRound next(int64_t max_drafts);

  int64_t drafted() const { return drafted_; }
  int64_t accepted() const { return accepted_; }

 private:
  // Runs `tokens` after `state`, appending their mixer inputs to `record`;
  // logits for every token when all_logits, else the last one's.
  void run(const InferModel& m, const LoraAdapter* adapter, DecodeState& state,
           std::span<const int32_t> tokens, MixerInputs& record, bool all_logits,
           Buffer<float>& logits) const;
  // Dense probabilities over the vocabulary of `d` into `p`.
  void densify(const TokenDistribution& d, std::vector<double>& p) const;
  // The accept/reject decision for draft x with target p and draft q (dense);
  // on a rejection *out is a draw from normalize(max(0, p - q)).
  bool accept(int32_t x, const std::vector<double>& p, const std::vector<double>& q, int32_t* out);

  const InferModel& target_;
  const InferModel& draft_;
  const LoraAdapter* target_adapter_;
  Sampler sampler_;
  int64_t k_;
  int64_t vocab_;
  DecodeState target_state_, draft_state_;
  // The last emitted token, which the target has not run yet; the tokens the
  // draft has not run yet (that one, and the last draft when all were kept).
  int32_t pending_ = -1;
  std::vector<int32_t> draft_pending_;
  int64_t drafted_ = 0, accepted_ = 0;
  // Each model's state before the round and the mixer inputs of what it ran
  // in the round: what rewinding needs. Kept across rounds, like the scratch below.
  DecodeState target_before_, draft_before_;
  MixerInputs target_record_, draft_record_;
  Buffer<float> logits_;  // 64-byte aligned rows for the head's stores
  std::vector<int32_t> drafts_;
  std::vector<std::vector<double>> q_;  // per draft, its draft distribution (dense)
  std::vector<double> p_, residual_;
  TokenDistribution dist_;
};

}  // namespace shamn
