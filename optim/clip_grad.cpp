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

// Sum of x[i]^2 in double over kLanes independent partial sums, combined
// pairwise: a fixed order (the same bits for any thread count and on every
// CPU), and a shape the compiler vectorises without reassociating. One running
// sum was a chain of dependent double adds, about 4 cycles an element: 5% of
// default's step at 8 x 512 for a pass that DRAM bandwidth allows in a tenth of
// that.
double sum_of_squares(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<double>(x[i]) * x[i];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

}  // namespace

double grad_norm(const std::vector<NamedVar>& params) {
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
      partial[static_cast<size_t>(c)] = sum_of_squares(k.data + k.lo, k.hi - k.lo);
    }
  });
  // Per gradient in chunk order, then over gradients in order.
  double sum_sq = 0;
  for (size_t g = 0; g + 1 < first.size(); ++g) {
    double total = 0;
    for (size_t c = first[g]; c < first[g + 1]; ++c) total += partial[c];
    sum_sq += total;
  }
  return std::sqrt(sum_sq);
}

float clip_scale(double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm)
    return static_cast<float>(max_norm / (norm + 1e-6));
  return 1.0f;
}

double clip_grad_norm(const std::vector<NamedVar>& params, double max_norm) {
  const double norm = grad_norm(params);
  const float factor = clip_scale(norm, max_norm);
  if (factor == 1.0f) return norm;
  int64_t elements = 0;
  for (const NamedVar& p : params) {
    const Tensor& g = p.var.grad();
    if (!g.defined()) continue;
    elements += g.numel();
    float* d = g.data<float>();
    parallel_for(0, g.numel(), kChunk, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] *= factor;
    });
  }
  profile_work(elements, 2 * static_cast<int64_t>(sizeof(float)) * elements);  // scaled in place
  return norm;
}

}  // namespace shamn
