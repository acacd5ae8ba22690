#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "core/profiler.h"

namespace shamn {
namespace {

// A run of one gradient's elements; every gradient is cut into runs of kChunk
// from its start, so the cut (and the summation order) never depends on threads.
struct Chunk {
  float* data;
  int64_t lo, hi;
};
constexpr int64_t kChunk = int64_t{1} << 15;

}  // namespace

double clip_grad_norm(const std::vector<NamedVar>& params, double max_norm) {
  // All chunks of all gradients go into one parallel loop: most parameters are
  // small, and one loop per parameter would run each of them on one thread.
  std::vector<Chunk> chunks;
  std::vector<size_t> first{0};  // gradient g owns chunks [first[g], first[g + 1])
  for (const NamedVar& p : params) {
    const Tensor& g = p.var.grad();
    if (!g.defined()) continue;
    for (int64_t lo = 0; lo < g.numel(); lo += kChunk)
      chunks.push_back({g.data<float>(), lo, std::min(g.numel(), lo + kChunk)});
    first.push_back(chunks.size());
  }
  int64_t elements = 0;
  for (const Chunk& k : chunks) elements += k.hi - k.lo;
  // The norm: a square and an add per element, each gradient read once.
  profile_work(2 * elements, static_cast<int64_t>(sizeof(float)) * elements);
  std::vector<double> partial(chunks.size());
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const Chunk& k = chunks[static_cast<size_t>(c)];
      double s = 0;
      for (int64_t i = k.lo; i < k.hi; ++i) s += static_cast<double>(k.data[i]) * k.data[i];
      partial[static_cast<size_t>(c)] = s;
    }
  });
  // Per gradient in chunk order, then over gradients in order.
  double sum_sq = 0;
  for (size_t g = 0; g + 1 < first.size(); ++g) {
    double total = 0;
    for (size_t c = first[g]; c < first[g + 1]; ++c) total += partial[c];
    sum_sq += total;
  }
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float factor = static_cast<float>(max_norm / (norm + 1e-6));
    profile_work(elements, 2 * static_cast<int64_t>(sizeof(float)) * elements);  // scaled in place
    parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const Chunk& k = chunks[static_cast<size_t>(c)];
        for (int64_t i = k.lo; i < k.hi; ++i) k.data[i] *= factor;
      }
    });
  }
  return norm;
}

}  // namespace shamn
