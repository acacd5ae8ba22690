#pragma once
#include <utility>
#include <vector>

#include "autograd/ops_moe.h"
#include "core/model_config.h"
#include "layers/block_sparse_linear.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace shamn {

// Expert(u) = down(gelu(up(u))), up: D -> H, down: H -> D, both block-sparse.
class MoeExpert : public Module {
 public:
  MoeExpert(const MoeOptions& options, double down_scale);
  Var forward(const Var& u) const;
  const BlockSparseLinear& up() const { return up_; }
  const BlockSparseLinear& down() const { return down_; }

 private:
  BlockSparseLinear& up_;
  BlockSparseLinear& down_;
};

// SPEC 1.6: tree routing (top group_k groups, then top k experts by joint P),
// gates normalised over the selected experts, dropless dispatch with each
// expert's tokens run as one block-sparse GEMM, Switch load-balance aux loss.
// Parameters: router_group.weight [G, D], router_expert.weight [G*E, D] (init
// N(0, 0.02^2): near-uniform routing at start), experts.{e}.{up,down}.
class HierarchicalMoE : public Module {
 public:
  // down_scale multiplies the experts' `down` init (residual-branch scaling).
  HierarchicalMoE(const MoeOptions& options, double down_scale = 1.0);

  struct Output {
    Var y;           // [..., D]: the layer's output, plus the residual when one is given
    Var aux;         // scalar load-balance loss of this layer
    Tensor experts;  // int32 [N, k] chosen experts (for statistics)
  };
  // residual (u's shape, optional): added to the output in the combine's pass,
  // the bits of add(residual, forward(u).y) without a pass of its own.
  Output forward(const Var& u, const Var& residual = Var()) const;
  // Every expert on its routed tokens' rows of u ([N, D]; plan.order lists
  // them by expert), the experts running concurrently: [N*k, D] in plan order.
  Var experts_forward(const Var& u, const MoeDispatch& plan) const;

  const MoeOptions& options() const { return options_; }
  const MoeExpert& expert(int64_t e) const { return *experts_[static_cast<size_t>(e)]; }

 private:
  // The group and expert routers' logits of u [N, D]: [N, G] and [N, X].
  std::pair<Var, Var> router_logits(const Var& u) const;
  // y (the experts' `layer` outputs over the segments of x) plus their LoRA
  // adapters' outputs, where any expert has one (summed in y's storage).
  Var with_adapters(const Var& x, const Var& y, const MoeDispatch& plan,
                    const BlockSparseLinear& (MoeExpert::*layer)() const) const;

  MoeOptions options_;
  Linear& router_group_;
  Linear& router_expert_;
  std::vector<MoeExpert*> experts_;
};

}  // namespace shamn
