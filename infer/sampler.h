#pragma once
// Next-token sampling as llama.cpp and Hugging Face do it: temperature, then
// top-k, then top-p (nucleus) over what is left, then a draw. The draws come
// from a Philox stream keyed by the seed, so the same seed and logits give the
// same tokens. temperature 0 is greedy (argmax, lowest id on ties). Candidates
// rank by logit, then by lower id; a NaN logit is never one.
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace shamn {

// The index of the first maximum of logits [vocab] (a NaN never wins; 0 when
// every value is NaN). Vectorised: greedy decoding calls it once per token
// over the whole vocabulary.
int32_t argmax_logit(const float* logits, int64_t vocab);

// The k likeliest tokens of logits [vocab] in `order`, likeliest first (lower id
// on ties; NaN logits never; fewer than k only where the rest are NaN). O(V):
// one pass against a rising bar for small k, a radix sort for large.
void likeliest_tokens(const float* logits, int64_t vocab, int64_t k, std::vector<int32_t>& order);

// The largest bias logit_bias may add or take away (OpenAI's).
constexpr double kLogitBiasLimit = 100;

struct SamplingOptions {
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = all tokens
  double top_p = 0.95;       // 1 = no nucleus cut
  uint64_t seed = 1;
  // OpenAI's penalties, in [-2, 2], over the tokens this Sampler has drawn (the
  // generated text, not the prompt, as OpenAI and vLLM count): a token's logit
  // less frequency_penalty times its count, less presence_penalty once drawn.
  double frequency_penalty = 0;
  double presence_penalty = 0;
  // Added to a token's logit, in [-kLogitBiasLimit, kLogitBiasLimit] (OpenAI's
  // logit_bias): -100 bans it.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The changes above, applied to the logits before temperature and greedy alike.
  bool adjusts_logits() const {
    return frequency_penalty != 0 || presence_penalty != 0 || !logit_bias.empty();
  }
  void validate() const;  // InputError naming the flag
  // InputError where logit_bias names a token past the model's vocabulary.
  void check_vocabulary(int64_t vocab) const;
};

// The distribution a Sampler draws from, after temperature, top-k and top-p:
// the tokens that can be drawn, likeliest first, and their weights. Token
// tokens[i] has probability weights[i] / total; every other token 0. The
// weights stay unnormalised so that a draw makes exactly the float operations
// Sampler::sample always made (the same seed gives the same text).
struct TokenDistribution {
  std::vector<int32_t> tokens;
  std::vector<double> weights;
  double total = 0.0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  const SamplingOptions& options() const { return options_; }
  // logits: [vocab]. distribution() then draw(); greedy takes the argmax and no
  // draw. With penalties or a bias, of a copy of the logits that has them, and the
  // token is counted for the penalties of the next.
  int32_t sample(const float* logits, int64_t vocab);
  // The final sampling distribution of logits [vocab]; greedy: the argmax alone.
  void distribution(const float* logits, int64_t vocab, TokenDistribution& out) const;
  // A token drawn from `d` with one uniform draw.
  int32_t draw(const TokenDistribution& d);
  // The next uniform draw in [0, 1) of the same seeded stream.
  double uniform() { return rng_.uniform(); }

 private:
  SamplingOptions options_;
  Rng rng_;
  TokenDistribution scratch_;
  std::vector<float> adjusted_;                  // the logits with penalties and bias
  std::unordered_map<int32_t, int64_t> counts_;  // tokens drawn, where penalties count them
};

}  // namespace shamn
