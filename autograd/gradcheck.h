#pragma once
// Finite-difference gradient checks. The function under test maps leaf inputs to a
// Var of any shape; the check backpropagates a fixed random seed w (so every output
// element counts, with a distinct weight) and compares the gradient of
// L(x) = sum(w * f(x)) with central differences (L(x+eps) - L(x-eps)) / 2eps.
// Run it on f64 inputs (tight tolerances) for the math, and on f32 inputs (loose
// tolerances) for the float code path.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace shamn {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  // > 0: each input's atol is atol_fraction of its largest |numeric| gradient,
  // kept within [atol_floor, atol]. A loss averaged over many positions has
  // small gradients, which a fixed atol for float round-off would pass when
  // off by 10%.
  double atol_fraction = 0;
  double atol_floor = 0;
  // 0: perturb every input element. k > 0: check k random directions per input
  // instead (directional derivatives), for inputs too large to perturb one by one.
  int directions = 0;
  uint64_t seed = 1234;
  std::vector<bool> skip;  // skip[i]: input i is held constant (not checked)
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string report;  // the worst mismatch: input, element, analytic vs numeric
};

using GradcheckFn = std::function<Var(const std::vector<Var>&)>;

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// The same for a closure over existing leaves (e.g. a module's parameters, after
// Module::to(DType::f64)): each leaf is perturbed in place and restored, and its
// gradient is zeroed first. Leaves that do not require a gradient are skipped.
GradcheckResult gradcheck_leaves(const std::function<Var()>& f, const std::vector<Var>& leaves,
                                 const GradcheckOptions& options = {});

}  // namespace shamn
