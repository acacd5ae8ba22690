#include "train/grad_tree.h"

#include <utility>

#include "core/check.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace shamn {

namespace {

template <class T>
void add_into(const Tensor& out, const Tensor& in) {
  T* o = out.data<T>();
  const T* x = in.data<T>();
  parallel_for(0, out.numel(), 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] += x[i];
  });
}

}  // namespace

GradientTree::GradientTree(const std::vector<NamedVar>& params) {
  for (const NamedVar& p : params) params_.push_back(p.var);
}

void GradientTree::run(int64_t first, int64_t end, const Micro& micro) {
  SHAMN_CHECK(first < end, "GradientTree: empty micro-batch range [", first, ", ", end, ")");
  // One level per halving; sized before the recursion holds references into it.
  size_t depth = 0;
  for (int64_t n = end - first; n > 1; n = n - n / 2) ++depth;
  if (levels_.size() < depth) levels_.resize(depth);
  end_ = end;
  spine_depth_ = 0;
  finalized_.assign(params_.size(), 0);
  sum(first, end, 0, micro);
  const ProfileScope profile("grad_tree_add", ProfileCategory::optimizer);
  for (size_t i = 0; i < params_.size(); ++i) finalize(i);
}

void GradientTree::finalize(size_t i) {
  if (finalized_[i]) return;
  finalized_[i] = 1;
  for (size_t level = spine_depth_; level-- > 0;) add_left(levels_[level], i);
}

void GradientTree::add_left(const Level& l, size_t i) {
  if (!l.has_left[i]) return;
  const Var& p = params_[i];
  // right + left; IEEE addition commutes, so this is left + right bit for bit.
  if (p.grad().dtype() == DType::f64)
    add_into<double>(p.grad(), l.left[i]);
  else
    add_into<float>(p.grad(), l.left[i]);
}

void GradientTree::sum(int64_t lo, int64_t hi, size_t level, const Micro& micro) {
  if (hi - lo == 1) {
    {
      // Marks the gradients zero; the buffers are filled (or written over) by
      // the backward pass's ops, whose profile rows count those bytes.
      const ProfileScope profile("zero_grad", ProfileCategory::optimizer);
      for (const Var& p : params_) p.zero_grad();
    }
    const bool last = hi == end_;
    if (last) spine_depth_ = level;
    micro(lo, last);
    return;
  }
  Level& l = levels_[level];
  l.left.resize(params_.size());
  l.has_left.assign(params_.size(), 0);
  const int64_t mid = lo + (hi - lo) / 2;
  sum(lo, mid, level + 1, micro);
  // The left sum moves aside (a buffer swap, no copy); the right one is built in
  // the buffer it left, which the next leaf zeroes.
  for (size_t i = 0; i < params_.size(); ++i) {
    Var& p = params_[i];
    if (!p.grad().defined()) continue;
    l.has_left[i] = 1;
    if (!l.left[i].defined()) l.left[i] = Tensor::empty(p.shape(), p.grad().dtype());
    Tensor left = p.grad();
    p.set_grad(std::move(l.left[i]));
    l.left[i] = std::move(left);
  }
  sum(mid, hi, level + 1, micro);
  if (hi == end_) return;  // on the last micro-batch's path: finalize() adds
  const ProfileScope profile("grad_tree_add", ProfileCategory::optimizer);
  for (size_t i = 0; i < params_.size(); ++i) add_left(l, i);
}

}  // namespace shamn
