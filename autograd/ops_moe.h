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

// Dispatch plan: the tokens routed to each expert, all in one list grouped by
// expert (so the experts run as one op over consecutive rows), and for each
// (token, slot) the row of that token in this grouped batch.
struct MoeDispatch {
  Tensor order;                  // int32 [N*k]: token ids, by expert, ascending within one
  std::vector<int64_t> offsets;  // [X+1]: expert e's rows are [offsets[e], offsets[e+1])
  Tensor row;                    // int32 [N, k]
  int64_t count(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};
MoeDispatch plan_dispatch(const Tensor& experts, int64_t num_experts);

// out[t] = sum_i gates[t, i] * expert_rows[row[t, i]], plus residual[t] when a
// residual [N, D] is given: add(residual, moe_combine(...)) in one pass, the same bits.
// expert_rows: [N*k, D], the experts' outputs in plan order; gates: [N, k].
Var moe_combine(const Var& expert_rows, const Var& gates, const MoeDispatch& plan,
                const Var& residual = Var());

}  // namespace shamn
