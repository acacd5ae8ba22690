#include "layers/hierarchical_moe.h"

#include <algorithm>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"

namespace shamn {

MoeExpert::MoeExpert(const MoeOptions& o, double down_scale)
    : up_(register_module("up", std::make_unique<BlockSparseLinear>(o.up))),
      down_(register_module("down", std::make_unique<BlockSparseLinear>(o.down, down_scale))) {}

Var MoeExpert::forward(const Var& u) const { return down_.forward(gelu(up_.forward(u))); }

HierarchicalMoE::HierarchicalMoE(const MoeOptions& o, double down_scale)
    : options_(o),
      router_group_(register_module("router_group", std::make_unique<Linear>(o.dim, o.groups, false, 0.02))),
      router_expert_(
          register_module("router_expert", std::make_unique<Linear>(o.dim, o.experts(), false, 0.02))) {
  o.validate();
  auto& list = register_module("experts", std::make_unique<ModuleList>());
  for (int64_t e = 0; e < o.experts(); ++e)
    experts_.push_back(&list.push_back(std::make_unique<MoeExpert>(o, down_scale)));
}

HierarchicalMoE::Output HierarchicalMoE::forward(const Var& u, const Var& residual) const {
  const MoeOptions& o = options_;
  const MoeShape shape{o.groups, o.experts_per_group, o.group_k, o.k};
  const int64_t n = u.numel() / o.dim, X = o.experts();
  Var u2 = reshape(u, {n, o.dim});
  // Named, not structured bindings: a lambda below reads rg (Clang 14 cannot capture a binding).
  const std::pair<Var, Var> logits = router_logits(u2);
  const Var& rg = logits.first;
  Var P = router_probs(rg, logits.second, shape);

  // Selection is piecewise constant: computed on values, outside the graph.
  Tensor experts = Tensor::empty({n, o.k}, DType::i32);
  dispatch_floating(u.dtype(), "moe", [&](auto zero) {
    using T = decltype(zero);
    Tensor pg = Tensor::empty({n, o.groups}, u.dtype());
    softmax_rows(pg.data<T>(), rg.value().data<T>(), n, o.groups);
    select_experts(experts.data<int32_t>(), pg.data<T>(), P.value().data<T>(), n, shape);
  });
  Var gates = moe_gates(P, experts);

  // aux = X * sum_e f[e] * mean_t P[t, e] = sum_{t,e} P[t, e] * (X * f[e] / N),
  // with f[e] = (selections of e) / (N * k) held constant.
  const MoeDispatch plan = plan_dispatch(experts, X);
  Tensor weight = Tensor::empty({X}, u.dtype());
  for (int64_t e = 0; e < X; ++e)
    weight.set_item(e, static_cast<double>(X) * static_cast<double>(plan.count(e)) /
                           (static_cast<double>(n) * o.k) / static_cast<double>(n));
  Var aux = sum(mul(P, Var(weight)));

  Var ys = experts_forward(u2, plan);
  Var y = moe_combine(ys, gates, plan, residual.defined() ? reshape(residual, {n, o.dim}) : Var());
  return {reshape(y, u.shape()), aux, experts};
}

std::pair<Var, Var> HierarchicalMoE::router_logits(const Var& u) const {
  if (router_group_.has_lora() || router_expert_.has_lora())
    return {router_group_.forward(u), router_expert_.forward(u)};
  // Both routers in one product, u [n, dim] times [Wg; We]^T [dim, G + X]: one pass
  // over u (and over its gradient in backward) instead of two, each of them far
  // longer than the few columns' arithmetic. The weights' rows are stacked as flat
  // [1, rows * dim] views, so their gradients come back apart.
  const int64_t G = options_.groups, X = options_.experts(), dim = options_.dim;
  const Var& wg = router_group_.weight();
  const Var& we = router_expert_.weight();
  const Var w = reshape(concat_last({reshape(wg, {1, G * dim}), reshape(we, {1, X * dim})}), {G + X, dim});
  const Var logits = matmul(u, w, false, true);
  return {slice_last(logits, 0, G), slice_last(logits, G, G + X)};
}

Var HierarchicalMoE::experts_forward(const Var& u, const MoeDispatch& plan) const {
  std::vector<BlockSparseOperands> up, down;
  for (const MoeExpert* e : experts_) {
    up.push_back({e->up().values(), e->up().col_index(), e->up().bias()});
    down.push_back({e->down().values(), e->down().col_index(), e->down().bias()});
  }
  // The up projections read their tokens' rows of u through the plan, so no
  // gathered [N*k, D] copy is kept for the backward; adapters on them read
  // the gathered rows, which then exist anyway.
  const bool up_adapted =
      std::any_of(experts_.begin(), experts_.end(), [](const MoeExpert* e) { return e->up().has_lora(); });
  Var pre;
  if (up_adapted) {
    const Var xs = gather_rows(u, plan.order);
    pre = with_adapters(xs, block_sparse_linear_segments(xs, plan.offsets, up, options_.up.block), plan,
                        &MoeExpert::up);
  } else {
    pre = block_sparse_linear_segments(u, plan.offsets, up, options_.up.block, InputActivation::none,
                                       plan.order);
  }
  // Without adapters on the down projections nothing else reads gelu(pre):
  // the down projections apply it themselves and do not keep it.
  const bool down_adapted =
      std::any_of(experts_.begin(), experts_.end(), [](const MoeExpert* e) { return e->down().has_lora(); });
  if (!down_adapted)
    return block_sparse_linear_segments(pre, plan.offsets, down, options_.down.block, InputActivation::gelu);
  const Var h = gelu(pre);
  return with_adapters(h, block_sparse_linear_segments(h, plan.offsets, down, options_.down.block), plan,
                       &MoeExpert::down);
}

Var HierarchicalMoE::with_adapters(const Var& x, const Var& y, const MoeDispatch& plan,
                                   const BlockSparseLinear& (MoeExpert::*layer)() const) const {
  std::vector<LowRankOperands> adapters;
  double scale = 0;
  const BlockSparseLinear* first = nullptr;
  for (const MoeExpert* e : experts_) {
    const BlockSparseLinear& l = (e->*layer)();
    adapters.push_back(l.lora());
    if (!l.has_lora()) continue;
    SHAMN_CHECK(!first || l.lora_scale() == scale, "MoE experts' adapters differ in alpha / rank");
    scale = l.lora_scale();
    if (!first) first = &l;
  }
  if (!first) return y;
  // One dropout mask over every expert's rows, keyed by the first adapted
  // expert (attach_lora gives them all the same probability).
  return add_low_rank_segments(y, first->lora_input(x), plan.offsets, adapters, scale);
}

}  // namespace shamn
