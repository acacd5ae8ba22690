#include "autograd/ops_moe.h"

#include <vector>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/kernels/lane_sum.h"
#include "core/prefetch.h"
#include "core/profiler.h"

namespace shamn {

Var router_probs(const Var& rg, const Var& re, const MoeShape& s) {
  const ProfileScope profile("router_probs", ProfileCategory::forward);
  SHAMN_CHECK(rg.dim() == 2 && re.dim() == 2 && rg.size(0) == re.size(0) && rg.size(1) == s.groups &&
                  re.size(1) == s.experts(),
              "router_probs: logits ", rg.value().str(), " and ", re.value().str(), " do not match ",
              s.groups, " groups of ", s.experts_per_group, " experts");
  const int64_t n = rg.size(0);
  const int64_t es = static_cast<int64_t>(dtype_size(rg.dtype()));
  record_work(op_work::router_probs_forward(n, s, es));
  Tensor P = Tensor::empty({n, s.experts()}, rg.dtype());
  Tensor pg = Tensor::empty({n, s.groups}, rg.dtype());
  Tensor pe = Tensor::empty({n, s.experts()}, rg.dtype());
  dispatch_floating(rg.dtype(), "router_probs", [&](auto zero) {
    using T = decltype(zero);
    router_probs_forward(P.data<T>(), pg.data<T>(), pe.data<T>(), rg.value().data<T>(), re.value().data<T>(),
                         n, s);
  });
  return record("router_probs", P, {rg, re}, [=](Node& node) {
    record_work(op_work::router_probs_backward(n, s, es, {node.needs_grad(0), node.needs_grad(1)}));
    dispatch_floating(node.out_dtype, "router_probs", [&](auto zero) {
      using T = decltype(zero);
      T* drg = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      T* dre = node.needs_grad(1) ? node.input_grad(1).data<T>() : nullptr;
      router_probs_backward(drg, dre, node.out_grad.data<T>(), pg.data<T>(), pe.data<T>(), n, s);
    });
  });
}

Var moe_gates(const Var& P, const Tensor& experts) {
  const ProfileScope profile("moe_gates", ProfileCategory::forward);
  SHAMN_CHECK(
      P.dim() == 2 && experts.dtype() == DType::i32 && experts.dim() == 2 && experts.size(0) == P.size(0),
      "moe_gates: P ", P.value().str(), " and experts ", experts.str(), " do not match");
  const int64_t n = P.size(0), X = P.size(1), k = experts.size(1);
  const int64_t s = static_cast<int64_t>(dtype_size(P.dtype()));
  record_work(op_work::moe_gates_forward(n, k, s));
  Tensor gates = Tensor::empty({n, k}, P.dtype());
  dispatch_floating(P.dtype(), "moe_gates", [&](auto zero) {
    using T = decltype(zero);
    moe_gates_forward(gates.data<T>(), P.value().data<T>(), experts.data<int32_t>(), n, X, k);
  });
  const Tensor pv = P.value();
  return record("moe_gates", gates, {P}, [=](Node& node) {
    if (!node.needs_grad(0)) return;
    record_work(op_work::moe_gates_backward(n, X, k, s));
    dispatch_floating(node.out_dtype, "moe_gates", [&](auto zero) {
      using T = decltype(zero);
      moe_gates_backward(node.input_grad(0).data<T>(), node.out_grad.data<T>(), gates.data<T>(), pv.data<T>(),
                         experts.data<int32_t>(), n, X, k);
    });
  });
}

MoeDispatch plan_dispatch(const Tensor& experts, int64_t num_experts) {
  const ProfileScope profile("plan_dispatch", ProfileCategory::forward);
  const int64_t n = experts.size(0), k = experts.size(1);
  record_work(op_work::plan_dispatch(n, k, num_experts));
  MoeDispatch plan;
  plan.offsets.resize(static_cast<size_t>(num_experts) + 1);
  plan.order = Tensor::empty({n * k}, DType::i32);
  plan.row = Tensor::empty({n, k}, DType::i32);
  moe_dispatch_plan(plan.order.data<int32_t>(), plan.row.data<int32_t>(), plan.offsets.data(),
                    experts.data<int32_t>(), n, k, num_experts);
  return plan;
}

namespace {

// row [count] is a permutation of [0, count): moe_combine's backward then
// writes every expert row's gradient (a plan from moe_dispatch always is one).
void check_rows_cover(const int32_t* row, int64_t count) {
  std::vector<bool> seen(static_cast<size_t>(count), false);
  for (int64_t j = 0; j < count; ++j) {
    SHAMN_CHECK(row[j] >= 0 && row[j] < count && !seen[static_cast<size_t>(row[j])], "moe_combine: plan row ",
                row[j], " at ", j, " is out of range or repeated");
    seen[static_cast<size_t>(row[j])] = true;
  }
}

}  // namespace

Var moe_combine(const Var& expert_rows, const Var& gates, const MoeDispatch& plan, const Var& residual) {
  const ProfileScope profile("moe_combine", ProfileCategory::forward);
  const int64_t n = gates.size(0), k = gates.size(1);
  SHAMN_CHECK(expert_rows.dim() == 2 && expert_rows.size(0) == n * k && plan.row.dim() == 2 &&
                  plan.row.size(0) == n && plan.row.size(1) == k,
              "moe_combine: expert rows ", expert_rows.value().str(), ", gates ", gates.value().str(),
              " and plan rows ", plan.row.str(), " do not match");
  SHAMN_CHECK(expert_rows.dtype() == gates.dtype(), "moe_combine: operand dtypes differ");
  const int64_t dim = expert_rows.size(1);
  const bool with_residual = residual.defined();
  if (with_residual)
    SHAMN_CHECK(residual.dim() == 2 && residual.size(0) == n && residual.size(1) == dim &&
                    residual.dtype() == gates.dtype(),
                "moe_combine: residual ", residual.value().str(), " is not [", n, ", ", dim,
                "] of the gates' dtype");
  const int64_t s = static_cast<int64_t>(dtype_size(gates.dtype()));
  record_work(op_work::moe_combine_forward(n, k, dim, s, with_residual));
  Tensor out = Tensor::empty({n, dim}, gates.dtype());
  dispatch_floating(gates.dtype(), "moe_combine", [&](auto zero) {
    using T = decltype(zero);
    moe_combine_forward(out.data<T>(), gates.value().data<T>(), expert_rows.value().data<T>(),
                        plan.row.data<int32_t>(), n, k, dim, /*accumulate=*/false,
                        with_residual ? residual.value().data<T>() : nullptr);
  });
  std::vector<Var> inputs{gates, expert_rows};
  if (with_residual) inputs.push_back(residual);
  const Tensor gv = gates.value(), yv = expert_rows.value();
  // Keep the index tensor alive with the node (the caller's plan may not outlive it).
  const Tensor rows_kept = plan.row;
  return record("moe_combine", out, std::move(inputs), [=](Node& node) {
    // The residual's gradient is dout itself: handed to its producer where it
    // can take it (as add does), else added below.
    const bool add_residual = with_residual && node.out_grad_to_add(2);
    record_work(
        op_work::moe_combine_backward(n, k, dim, s, {node.needs_grad(0), node.needs_grad(1)}, add_residual));
    dispatch_floating(node.out_dtype, "moe_combine", [&](auto zero) {
      using T = decltype(zero);
      const int32_t* kept_row = rows_kept.data<int32_t>();
      const T* dout = node.out_grad.data<T>();
      const T* g = gv.data<T>();
      const T* ys = yv.data<T>();
      T* dg = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      // Every expert row belongs to one (token, slot): the rows' gradient is
      // written whole, so a fresh buffer is stored into, not zeroed and added to.
      bool fresh = false;
      T* dys = node.needs_grad(1) ? node.input_grad_to_write(1, &fresh).data<T>() : nullptr;
      if (fresh) check_rows_cover(kept_row, n * k);
      // Each (token, slot) owns one expert row: no two tasks write the same element.
      parallel_for(0, n, row_grain(dim * k), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t)
          for (int64_t i = 0; i < k; ++i) {
            // The expert rows come in token order, not memory order: the next
            // token's rows are requested ahead (1.4x, experiments/roofline.md).
            if (t + 1 < hi) {
              const int64_t next = kept_row[(t + 1) * k + i];
              if (dg) prefetch_span(ys + next * dim, dim);
              if (dys) prefetch_span(dys + next * dim, dim, /*for_write=*/true);
            }
            const int64_t r = kept_row[t * k + i];
            const T* dot = dout + t * dim;
            if (dg) {
              // In lane_sum's 16 lanes: one dependent chain of dim adds was the
              // op's whole time (a 4-cycle add per element).
              const T* y = ys + r * dim;
              dg[t * k + i] += lane_sum<T>(dim, [&](int64_t d) { return dot[d] * y[d]; });
            }
            if (dys) {
              T* dyr = dys + r * dim;
              const T gi = g[t * k + i];
              if (fresh)
                for (int64_t d = 0; d < dim; ++d) dyr[d] = gi * dot[d];
              else
                for (int64_t d = 0; d < dim; ++d) dyr[d] += gi * dot[d];
            }
          }
      });
    });
    if (add_residual) node.add_out_grad_to(2);
  });
}

}  // namespace shamn
