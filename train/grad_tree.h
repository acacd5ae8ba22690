#pragma once
// The gradients of one optimizer step, summed over its micro-batches as a
// balanced binary tree in micro-batch order: sum[lo, hi) = sum[lo, mid) +
// sum[mid, hi) with mid = lo + (hi - lo) / 2. With 4 micro-batches that is
// (g0 + g1) + (g2 + g3).
//
// Why a tree and not g0 + g1 + g2 + g3 from left to right: with N ranks sharing
// the micro-batches (N a power of two dividing their count), each rank's block is
// a subtree, and the ranks' partial sums meet in the same tree
// (Communicator::sum_tree). One process and N processes then add the same numbers
// in the same order, so their weights are bitwise equal. What it costs one
// process: a second gradient buffer per tree level (ceil(log2(grad_accum)) of
// them, none when grad_accum is 1) and one addition over all gradients per
// micro-batch after the first.
//
// A parameter without a gradient (never reached by a backward pass) stays
// without one, as in a left-to-right sum, so AdamW leaves it alone.
#include <cstdint>
#include <functional>
#include <vector>

#include "autograd/variable.h"

namespace shamn {

class GradientTree {
 public:
  explicit GradientTree(const std::vector<NamedVar>& params);

  // Runs micro-batches [first, end) through `micro`, which must add micro-batch
  // m's gradients to the parameters' .grad() (a backward pass does), and leaves
  // their tree sum in .grad(). [first, end) is the root or a subtree of the tree.
  // `last` is true for the last micro-batch (end - 1): during its backward pass,
  // finalize(i) may be called for a parameter whose gradient it has completed.
  using Micro = std::function<void(int64_t m, bool last)>;
  void run(int64_t first, int64_t end, const Micro& micro);

  // Adds parameter i's left partial sums into its gradient now, instead of after
  // the last micro-batch: the additions that run() leaves until then, in the same
  // order, so that the gradient can be used before the backward pass ends.
  void finalize(size_t i);

 private:
  void sum(int64_t lo, int64_t hi, size_t level, const Micro& micro);

  std::vector<Var> params_;
  // Per tree level: each parameter's left partial sum while its right one is built.
  struct Level {
    std::vector<Tensor> left;
    std::vector<uint8_t> has_left;
  };
  void add_left(const Level& l, size_t i);

  std::vector<Level> levels_;
  int64_t end_ = 0;
  // Levels whose right subtree holds the last micro-batch: their additions wait
  // for finalize(). The last micro-batch sits that deep.
  size_t spine_depth_ = 0;
  std::vector<uint8_t> finalized_;
};

}  // namespace shamn
