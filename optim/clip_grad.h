#pragma once
#include <vector>

#include "autograd/variable.h"

namespace shamn {

// Global L2 norm of all gradients (summed in double in a fixed order: thread-count
// independent). If max_norm > 0 and the norm exceeds it, every gradient is scaled
// by max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_ does. Returns the
// norm before clipping; a non-finite norm is returned as is and nothing is scaled
// (the trainer skips such a step).
double clip_grad_norm(const std::vector<NamedVar>& params, double max_norm);

}  // namespace shamn
