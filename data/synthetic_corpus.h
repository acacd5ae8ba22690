#pragma once
// Token streams with a known entropy, for tests and benchmarks: a loss curve on
// them has a floor we know in advance.
#include <cstdint>
#include <vector>

namespace shamn {

// A first-order Markov chain over `vocab` tokens in which every token has
// `successors` distinct next tokens (drawn once from Philox(seed)), each equally
// likely. Whatever the chain, its entropy rate is exactly ln(successors) nats
// per token: the best achievable mean cross-entropy.
struct MarkovCorpus {
  std::vector<uint32_t> tokens;
  double entropy_nats = 0;
};
MarkovCorpus markov_corpus(int64_t vocab, int64_t successors, int64_t n_tokens, uint64_t seed);

}  // namespace shamn
