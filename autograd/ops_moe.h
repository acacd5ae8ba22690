#pragma once
// Differentiable pieces of the hierarchical MoE (SPEC 1.6).
#include <vector>

#include "autograd/variable.h"
#include "core/kernels/moe_routing.h"

namespace shamn {

// rg: [N, G], re: [N, G*E] -> joint probabilities P [N, G*E].
Var router_probs(const Var& rg, const Var& re, const MoeShape& shape);

// P: [N, X], experts: int32 [N, k] -> gates [N, k] = P[e_i] / sum_selected P.
Var moe_gates(const Var& P, const Tensor& experts);

// Dispatch plan: for each expert, the tokens routed to it (ascending) and, for
// each (token, slot), the row of that token in its expert's batch.
struct MoeDispatch {
  std::vector<Tensor> tokens;  // per expert: int32 [M_e]
  Tensor row_in_expert;        // int32 [N, k]
};
MoeDispatch plan_dispatch(const Tensor& experts, int64_t num_experts);

// out[t] = sum_i gates[t, i] * expert_out[e_i][row_in_expert[t, i]].
// expert_out[e]: [M_e, D] (undefined when no token chose e); gates: [N, k].
Var moe_combine(const std::vector<Var>& expert_out, const Var& gates, const Tensor& experts,
                const MoeDispatch& plan, int64_t dim);

}  // namespace shamn
