#pragma once
// AdamW (Loshchilov & Hutter; SPEC section 3), equivalent to torch.optim.AdamW:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   theta -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * theta)
// with one weight decay per parameter group and the learning rate given per step
// (by the schedule). t counts the updates of that parameter, as torch.optim.AdamW
// keeps it per parameter: a parameter whose first gradient comes late (an expert
// no token reached) takes its first update with t = 1, not the optimizer's step
// count. Moments are f32 and updated element-wise in parallel: the result does
// not depend on the thread count.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace shamn {

struct ParamGroup {
  std::string name;  // e.g. "decay", "no_decay"
  std::vector<NamedVar> params;
  double weight_decay = 0.0;
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

class AdamW {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});

  // One update at learning rate lr, of every gradient times grad_scale (gradient
  // clipping's factor, clip_scale). Parameters that have never had a gradient (an
  // expert no token has reached yet) are left alone; once a parameter has one,
  // zero_grad() zeroes it rather than removing it, so it is updated every step
  // after (its moments decay, weight decay applies) whether reached or not.
  void step(double lr, float grad_scale = 1.0f);
  void zero_grad();

  int64_t step_count() const { return step_; }
  // For a copy of another optimizer's state (data-parallel ranks): its step count.
  void set_step_count(int64_t step) { step_ = step; }
  // Each parameter's update count (its t), in parameter order, and a copy of
  // another optimizer's (data-parallel ranks; the same parameters).
  std::vector<int64_t> update_counts() const;
  void set_update_counts(const std::vector<int64_t>& counts);
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const AdamWOptions& options() const { return options_; }

  // The optimizer state for checkpoints: "m.<param>" and "v.<param>" moments.
  std::vector<NamedTensor> state_tensors() const;
  // The parameters that have had no gradient yet, in parameter order: with the
  // moments, the step count and late_updates(), what a resumed run needs to
  // continue identically.
  std::vector<std::string> unreached() const;
  // The reached parameters whose update count is not the step count (first
  // reached after step 1), with their counts, in parameter order.
  std::vector<std::pair<std::string, int64_t>> late_updates() const;
  // Restores a state saved by state_tensors(), unreached() and late_updates()
  // into an optimizer whose parameters have no gradient yet (a fresh model):
  // every moment must be present with its parameter's shape, and nothing else
  // (errors name the tensor); every parameter not named in `unreached` gets a
  // zero gradient and the update count `late` gives it, else `step`.
  void load_state(int64_t step, const std::vector<NamedTensor>& tensors,
                  const std::vector<std::string>& unreached = {},
                  const std::vector<std::pair<std::string, int64_t>>& late = {});

 private:
  struct Slot {
    Var param;
    std::string name;
    double weight_decay;
    Tensor m, v;
    int64_t updates = 0;  // this parameter's t
  };
  std::vector<ParamGroup> groups_;
  AdamWOptions options_;
  std::vector<Slot> slots_;
  int64_t step_ = 0;
};

// SPEC 3: decay for matrices, tables, keys and block values (2-D and up, and
// mixer.conv); never for gains, biases or the hash `importance`.
bool takes_weight_decay(const NamedVar& p);
std::vector<ParamGroup> split_weight_decay(const std::vector<NamedVar>& params, double weight_decay);

}  // namespace shamn
