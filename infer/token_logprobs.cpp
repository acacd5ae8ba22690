#include "infer/token_logprobs.h"

#include "core/kernels/activation.h"
#include "infer/sampler.h"

namespace shamn {

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
