#include "infer/token_logprobs.h"

#include <algorithm>
#include <cmath>

namespace shamn {

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top) {
  // log-sum-exp in double about the largest logit: at V = 32,000 the float sum
  // of exp() would round away the smallest terms' contribution.
  float max = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v)
    if (logits[v] > max) max = logits[v];
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(logits[v])) sum += std::exp(static_cast<double>(logits[v]) - max);
  const double log_z = static_cast<double>(max) + std::log(sum);
  const auto logprob = [&](int32_t v) { return static_cast<float>(logits[v] - log_z); };

  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  // The `top` best by a bounded min-heap of (logit, id): O(V log top).
  const auto worse = [&](int32_t a, int32_t b) {  // a ranks after b
    return logits[a] < logits[b] || (logits[a] == logits[b] && a > b);
  };
  const auto heap_order = [&](int32_t a, int32_t b) { return worse(b, a); };  // the worst on top
  std::vector<int32_t> best;
  const auto k = static_cast<size_t>(std::min(top, vocab));
  if (k > 0) {
    best.reserve(k + 1);
    for (int64_t v = 0; v < vocab; ++v) {
      if (std::isnan(logits[v])) continue;
      const auto id = static_cast<int32_t>(v);
      if (best.size() < k) {
        best.push_back(id);
        std::push_heap(best.begin(), best.end(), heap_order);
      } else if (worse(best.front(), id)) {
        std::pop_heap(best.begin(), best.end(), heap_order);
        best.back() = id;
        std::push_heap(best.begin(), best.end(), heap_order);
      }
    }
  }
  std::sort(best.begin(), best.end(), [&](int32_t a, int32_t b) { return worse(b, a); });
  out.top.reserve(best.size());
  for (const int32_t id : best) out.top.emplace_back(id, logprob(id));
  return out;
}

}  // namespace shamn
