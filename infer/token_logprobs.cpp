#include "infer/token_logprobs.h"

#include "core/kernels/activation.h"
#include "infer/sampler.h"

namespace shamn {

void Utf8Counter::add(std::string_view bytes) {
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (need_ > 0 && b >= lo_ && b <= hi_) {  // the current character goes on
      --need_;
      lo_ = 0x80, hi_ = 0xBF;
      continue;
    }
    // A new character, or one U+FFFD for a byte that starts none (the decoder
    // replaces a cut-off character once, then reads this byte afresh).
    replaced_ |= need_ > 0;
    ++characters_;
    need_ = 0;
    lo_ = 0x80, hi_ = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need_ = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need_ = 2;
      if (b == 0xE0) lo_ = 0xA0;  // no overlong forms
      if (b == 0xED) hi_ = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      need_ = 3;
      if (b == 0xF0) lo_ = 0x90;
      if (b == 0xF4) hi_ = 0x8F;  // nothing past U+10FFFF
    } else if (b >= 0x80) {
      replaced_ = true;  // a continuation byte, C0, C1 or F5-FF: starts no character
    }
  }
}

int64_t utf8_characters(std::string_view text) {
  Utf8Counter counter;
  counter.add(text);
  return counter.characters();
}

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top) {
  // Float exps in 16 lanes, the log in double: the log-softmax of a 32,000-token
  // row in two vectorised passes (a double exp a token made logprobs cost 2.7x
  // a decoded token's time; experiments/serving.md, stop 85).
  const double log_z = logsumexp(logits, vocab);
  const auto logprob = [&](int32_t v) { return static_cast<float>(logits[v] - log_z); };
  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  if (top > 0) {
    thread_local std::vector<int32_t> order;
    likeliest_tokens(logits, vocab, top, order);
    out.top.reserve(order.size());
    for (const int32_t id : order) out.top.emplace_back(id, logprob(id));
  }
  return out;
}

}  // namespace shamn
