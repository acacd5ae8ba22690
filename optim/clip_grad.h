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

// The two halves of clip_grad_norm, for a caller that applies the factor while
// it reads the gradients anyway (the trainer: AdamW::step's grad_scale, so
// clipping costs no pass of its own). grad_norm is clip_grad_norm's norm, bit
// for bit; clip_scale is the factor clip_grad_norm scales by (1 when the norm
// is within max_norm, max_norm <= 0, or the norm is not finite).
double grad_norm(const std::vector<NamedVar>& params);
float clip_scale(double norm, double max_norm);

}  // namespace shamn
