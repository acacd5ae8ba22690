#pragma once
#include <cstdint>

#include "autograd/variable.h"

namespace shamn {

// Which of dropout's masks: element i of a tensor is kept when word e / 16 of
// Philox4x32-10 block 16 (i / 64) + e % 16 of (seed, stream) (core/rng.h), e =
// i % 64, lies below (1 - p) * 2^32: 16 blocks give 64 elements their words in
// order (core/kernels/philox_span.h). A mask is a pure function of the key and
// each element's index, the same at any thread count and kernel level, and
// needs no storage: the backward pass draws it again.
struct DropoutKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

// Inverted dropout (Srivastava et al., 2014): each element zeroed with
// probability p, the others scaled by 1 / (1 - p), so its expectation is x.
// p in [0, 1); at p = 0 it returns x itself (no copy, no node).
Var dropout(const Var& x, double p, const DropoutKey& key);

// Whether dropout(x, p, key) keeps element i of x.
bool dropout_keeps(double p, const DropoutKey& key, uint64_t i);

}  // namespace shamn
