#pragma once
// Log-probabilities of tokens under the model's own distribution (the
// log-softmax of its logits, before temperature, top-k or top-p), as OpenAI's
// `logprobs` reports them: the token's own and the likeliest alternatives.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace shamn {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // NaN for a prompt's first token, which nothing predicts
  // The `top` likeliest tokens, likeliest first (lower id on ties; NaN logits never).
  std::vector<std::pair<int32_t, float>> top;
  bool in_prompt = false;  // a prompt token (echo), else a generated one
  // Where the token's text starts, in the prompt's text or in the generated
  // text: in bytes, and in characters (UTF-8 lead bytes before it), the
  // text_offset clients index their strings by.
  int64_t offset = 0;
  int64_t char_offset = 0;
};

// The characters of UTF-8 text as it grows, as a decoder that replaces each
// ill-formed subpart by one U+FFFD shows them (Python's errors="replace",
// nlohmann::json's dump): text_offset counts these, so that a client indexes
// its decoded text by them.
class Utf8Counter {
 public:
  void add(std::string_view bytes);
  int64_t characters() const { return characters_; }
  // Whether the text so far is well-formed UTF-8: nothing replaced, nothing cut off.
  bool well_formed() const { return !replaced_ && need_ == 0; }

 private:
  int64_t characters_ = 0;
  int need_ = 0;                         // continuation bytes the current character still takes
  unsigned char lo_ = 0x80, hi_ = 0xBF;  // the range of its next byte
  bool replaced_ = false;
};
int64_t utf8_characters(std::string_view text);

// logits: [vocab], the row that predicts `token`. top: how many alternatives (>= 0).
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top);

}  // namespace shamn
