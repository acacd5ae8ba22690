#include "data/synthetic_corpus.h"

#include <cmath>

#include "core/check.h"
#include "core/rng.h"

namespace shamn {

MarkovCorpus markov_corpus(int64_t vocab, int64_t successors, int64_t n_tokens, uint64_t seed) {
  SHAMN_CHECK(vocab >= 1 && successors >= 1 && successors <= vocab && n_tokens >= 1,
              "markov_corpus: need 1 <= successors (", successors, ") <= vocab (", vocab,
              ") and n_tokens >= 1");
  Rng table_rng(seed, 1);
  std::vector<uint32_t> next(static_cast<size_t>(vocab * successors));
  // `successors` distinct tokens a token: a partial Fisher-Yates shuffle of 0..vocab-1,
  // the pool put back in order after each token by undoing its swaps (rebuilding it
  // made the table vocab^2 work).
  std::vector<uint32_t> pool(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) pool[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  std::vector<int64_t> swapped(static_cast<size_t>(successors));
  for (int64_t t = 0; t < vocab; ++t) {
    for (int64_t i = 0; i < successors; ++i) {
      const int64_t j = i + static_cast<int64_t>(table_rng.below(static_cast<uint64_t>(vocab - i)));
      std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(j)]);
      swapped[static_cast<size_t>(i)] = j;
      next[static_cast<size_t>(t * successors + i)] = pool[static_cast<size_t>(i)];
    }
    for (int64_t i = successors - 1; i >= 0; --i)
      std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(swapped[static_cast<size_t>(i)])]);
  }
  MarkovCorpus out;
  out.entropy_nats = std::log(static_cast<double>(successors));
  out.tokens.resize(static_cast<size_t>(n_tokens));
  Rng walk(seed, 2);
  uint32_t token = static_cast<uint32_t>(walk.below(static_cast<uint64_t>(vocab)));
  for (int64_t i = 0; i < n_tokens; ++i) {
    out.tokens[static_cast<size_t>(i)] = token;
    token = next[static_cast<size_t>(token) * static_cast<size_t>(successors) +
                 walk.below(static_cast<uint64_t>(successors))];
  }
  return out;
}

}  // namespace shamn
