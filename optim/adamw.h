#pragma once
// AdamW (Loshchilov & Hutter; SPEC section 3), equivalent to torch.optim.AdamW:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   theta -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * theta)
// with one weight decay per parameter group and the learning rate given per step
// (by the schedule). Moments are f32 and updated element-wise in parallel: the
// result does not depend on the thread count.
#include <cstdint>
#include <string>
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
  // clipping's factor, clip_scale). Parameters without a gradient are left alone.
  void step(double lr, float grad_scale = 1.0f);
  void zero_grad();

  int64_t step_count() const { return step_; }
  // For a copy of another optimizer's state (data-parallel ranks): its step count.
  void set_step_count(int64_t step) { step_ = step; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const AdamWOptions& options() const { return options_; }

  // The optimizer state for checkpoints: "m.<param>" and "v.<param>" moments.
  std::vector<NamedTensor> state_tensors() const;
  // Restores a state saved by state_tensors(); every moment must be present with
  // its parameter's shape, and nothing else (errors name the tensor).
  void load_state(int64_t step, const std::vector<NamedTensor>& tensors);

 private:
  struct Slot {
    Var param;
    std::string name;
    double weight_decay;
    Tensor m, v;
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
