#pragma once
// Data-parallel training: every rank's gradients summed over the ranks, so each
// holds the step's full gradient and takes the same AdamW step.
#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "train/communicator.h"

namespace shamn {

class GradientExchange {
 public:
  // Tensors smaller than bucket_floats travel packed together, bigger ones alone.
  explicit GradientExchange(const std::vector<NamedVar>& params, size_t bucket_floats = size_t{1} << 22);

  // Sums .grad() over the ranks in Communicator::sum_tree's fixed order. A
  // parameter with a gradient on any rank gets one on every rank (zeros where it
  // had none), so all ranks agree on which parameters AdamW updates.
  void sum_over_ranks(Communicator& comm);

  int64_t bytes_per_step() const { return bytes_; }  // gradient bytes summed in the last call

 private:
  void flush(Communicator& comm, const std::vector<Var>& pending);

  std::vector<Var> params_;
  size_t bucket_floats_;
  std::vector<float> bucket_;
  int64_t bytes_ = 0;
};

}  // namespace shamn
