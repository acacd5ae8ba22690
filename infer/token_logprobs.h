#pragma once
// Log-probabilities of tokens under the model's own distribution (the
// log-softmax of its logits, before temperature, top-k or top-p), as OpenAI's
// `logprobs` reports them: the token's own and the likeliest alternatives.
#include <cstdint>
#include <utility>
#include <vector>

namespace shamn {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // NaN for a prompt's first token, which nothing predicts
  // The `top` likeliest tokens, likeliest first (lower id on ties; NaN logits never).
  std::vector<std::pair<int32_t, float>> top;
  bool in_prompt = false;  // a prompt token (echo), else a generated one
  // Where the token's text starts: in the prompt's text, or in the generated text.
  int64_t offset = 0;
};

// logits: [vocab], the row that predicts `token`. top: how many alternatives (>= 0).
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top);

}  // namespace shamn
