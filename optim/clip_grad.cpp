#include "optim/clip_grad.h"

#include <cmath>

#include "core/parallel.h"

namespace shamn {

double clip_grad_norm(const std::vector<NamedVar>& params, double max_norm) {
  double sum_sq = 0;
  for (const NamedVar& p : params) {
    const Tensor& g = p.var.grad();
    if (!g.defined()) continue;
    const float* pg = g.data<float>();
    sum_sq += parallel_sum(0, g.numel(), 1 << 15, [pg](int64_t lo, int64_t hi) {
      double s = 0;
      for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(pg[i]) * pg[i];
      return s;
    });
  }
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (const NamedVar& p : params) {
      const Tensor& g = p.var.grad();
      if (!g.defined()) continue;
      float* pg = g.data<float>();
      parallel_for(0, g.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) pg[i] *= factor;
      });
    }
  }
  return norm;
}

}  // namespace shamn
