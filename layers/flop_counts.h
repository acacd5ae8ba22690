#pragma once
// How much arithmetic one token costs, computed from the config alone (no model
// is built). FLOPs are 2 x the multiply-adds of the products a token actually
// executes, per SHAMN block:
//   mixer      D*K (depthwise conv) + D*a*b (block-sparse D -> D, a active blocks of b)
//   memory     D*2dh (query) + n*2dh (scores against both half-key tables)
//              + topk*D (weighted read of the top-k values)
//   MoE        D*G + D*G*E (both routers) + k * (H*a_up*b + D*a_down*b) (k routed experts)
// plus the embedding sum h*D and the head: tied, buckets*D (the bucket scores)
// + V*h (each logit gathers h of them); untied, V*D. Norms, activations, softmaxes and the top-k selection
// are O(D) or smaller and left out. Training costs about 3x forward (the backward pass takes a product per
// operand).
#include <cstdint>

#include "core/model_config.h"

namespace shamn {

struct FlopCounts {
  int64_t forward_per_token = 0;
  int64_t train_per_token = 0;  // 3 x forward
};

FlopCounts count_flops(const ModelConfig& config);

}  // namespace shamn
