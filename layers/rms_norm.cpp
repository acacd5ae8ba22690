#include "layers/rms_norm.h"

#include "autograd/ops.h"

namespace shamn {

RMSNorm::RMSNorm(int64_t dim, double eps)
    : gain_(register_parameter("gain", Tensor::full({dim}, 1.0))), eps_(eps) {}

void RMSNorm::init_own(uint64_t, const std::string&, const WeightInit&) { gain_.value().fill(1.0); }

Var RMSNorm::forward(const Var& x) const { return rms_norm(x, gain_, eps_); }

}  // namespace shamn
