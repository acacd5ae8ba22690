#pragma once
// How big a SHAMN model is and how much of it one token uses.
#include <cstdint>

#include "layers/shamn_model.h"

namespace shamn {

struct ParameterCounts {
  int64_t stored = 0;   // trainable parameters
  int64_t buffers = 0;  // non-trainable elements (hash bucket indices)
  // Parameters read to compute one token's loss: everything except the memory
  // values outside the token's top-k slots and the experts it is not routed to
  // (top-k of n_experts). The tied head scores every vocabulary token, so the
  // whole embedding table counts; untied, a token reads its `hashes` rows of the
  // table and of the importance, and the dense head counts whole.
  int64_t touched_per_token = 0;
};

ParameterCounts count_parameters(const Shamn& model);

}  // namespace shamn
