#include "autograd/ops_moe.h"

#include "autograd/dispatch.h"

namespace shamn {

Var router_probs(const Var& rg, const Var& re, const MoeShape& s) {
  SHAMN_CHECK(rg.dim() == 2 && re.dim() == 2 && rg.size(0) == re.size(0) &&
                  rg.size(1) == s.groups && re.size(1) == s.experts(),
              "router_probs: logits ", rg.value().str(), " and ", re.value().str(),
              " do not match ", s.groups, " groups of ", s.experts_per_group, " experts");
  const int64_t n = rg.size(0);
  Tensor P = Tensor::empty({n, s.experts()}, rg.dtype());
  Tensor pg = Tensor::empty({n, s.groups}, rg.dtype());
  Tensor pe = Tensor::empty({n, s.experts()}, rg.dtype());
  dispatch_floating(rg.dtype(), "router_probs", [&](auto zero) {
    using T = decltype(zero);
    router_probs_forward(P.data<T>(), pg.data<T>(), pe.data<T>(), rg.value().data<T>(),
                         re.value().data<T>(), n, s);
  });
  return record("router_probs", P, {rg, re}, [=](Node& node) {
    dispatch_floating(node.out_dtype, "router_probs", [&](auto zero) {
      using T = decltype(zero);
      T* drg = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      T* dre = node.needs_grad(1) ? node.input_grad(1).data<T>() : nullptr;
      router_probs_backward(drg, dre, node.out_grad.data<T>(), pg.data<T>(), pe.data<T>(), n, s);
    });
  });
}

Var moe_gates(const Var& P, const Tensor& experts) {
  SHAMN_CHECK(P.dim() == 2 && experts.dtype() == DType::i32 && experts.dim() == 2 &&
                  experts.size(0) == P.size(0),
              "moe_gates: P ", P.value().str(), " and experts ", experts.str(), " do not match");
  const int64_t n = P.size(0), X = P.size(1), k = experts.size(1);
  Tensor gates = Tensor::empty({n, k}, P.dtype());
  dispatch_floating(P.dtype(), "moe_gates", [&](auto zero) {
    using T = decltype(zero);
    moe_gates_forward(gates.data<T>(), P.value().data<T>(), experts.data<int32_t>(), n, X, k);
  });
  const Tensor pv = P.value();
  return record("moe_gates", gates, {P}, [=](Node& node) {
    if (!node.needs_grad(0)) return;
    dispatch_floating(node.out_dtype, "moe_gates", [&](auto zero) {
      using T = decltype(zero);
      moe_gates_backward(node.input_grad(0).data<T>(), node.out_grad.data<T>(), gates.data<T>(),
                         pv.data<T>(), experts.data<int32_t>(), n, X, k);
    });
  });
}

MoeDispatch plan_dispatch(const Tensor& experts, int64_t num_experts) {
  const int64_t n = experts.size(0), k = experts.size(1);
  const int32_t* e = experts.data<int32_t>();
  std::vector<int64_t> count(static_cast<size_t>(num_experts), 0);
  MoeDispatch plan;
  plan.row_in_expert = Tensor::empty({n, k}, DType::i32);
  int32_t* row = plan.row_in_expert.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      SHAMN_CHECK(e[t * k + i] >= 0 && e[t * k + i] < num_experts, "expert id ", e[t * k + i],
                  " out of range");
      row[t * k + i] = static_cast<int32_t>(count[e[t * k + i]]++);
    }
  for (int64_t x = 0; x < num_experts; ++x) plan.tokens.push_back(Tensor::empty({count[x]}, DType::i32));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i)
      plan.tokens[e[t * k + i]].data<int32_t>()[row[t * k + i]] = static_cast<int32_t>(t);
  return plan;
}

Var moe_combine(const std::vector<Var>& expert_out, const Var& gates, const Tensor& experts,
                const MoeDispatch& plan, int64_t dim) {
  const int64_t n = gates.size(0), k = gates.size(1);
  const int64_t X = static_cast<int64_t>(expert_out.size());
  // Inputs: gates first, then the experts that received tokens.
  std::vector<Var> inputs{gates};
  std::vector<int64_t> input_of(static_cast<size_t>(X), -1);
  for (int64_t x = 0; x < X; ++x)
    if (expert_out[x].defined()) {
      SHAMN_CHECK(expert_out[x].dim() == 2 && expert_out[x].size(1) == dim &&
                      expert_out[x].size(0) == plan.tokens[x].numel(),
                  "moe_combine: expert ", x, " output ", expert_out[x].value().str(),
                  " does not match its ", plan.tokens[x].numel(), " tokens");
      input_of[x] = static_cast<int64_t>(inputs.size());
      inputs.push_back(expert_out[x]);
    }
  Tensor out = Tensor::empty({n, dim}, gates.dtype());
  const int32_t* e = experts.data<int32_t>();
  const int32_t* row = plan.row_in_expert.data<int32_t>();
  dispatch_floating(gates.dtype(), "moe_combine", [&](auto zero) {
    using T = decltype(zero);
    const T* g = gates.value().data<T>();
    T* o = out.data<T>();
    parallel_for(0, n, row_grain(dim * k), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        T* ot = o + t * dim;
        for (int64_t d = 0; d < dim; ++d) ot[d] = 0;
        for (int64_t i = 0; i < k; ++i) {
          const T* y = expert_out[e[t * k + i]].value().template data<T>() + row[t * k + i] * dim;
          const T gi = g[t * k + i];
          for (int64_t d = 0; d < dim; ++d) ot[d] += gi * y[d];
        }
      }
    });
  });
  std::vector<Tensor> values;
  for (const Var& v : expert_out) values.push_back(v.defined() ? v.value() : Tensor());
  const Tensor gv = gates.value();
  // Keep the index tensors alive with the node (the caller's may not outlive it).
  const Tensor experts_kept = experts, rows_kept = plan.row_in_expert;
  return record("moe_combine", out, inputs, [=](Node& node) {
    dispatch_floating(node.out_dtype, "moe_combine", [&](auto zero) {
      using T = decltype(zero);
      const int32_t* e = experts_kept.data<int32_t>();
      const int32_t* row = rows_kept.data<int32_t>();
      const T* dout = node.out_grad.data<T>();
      const T* g = gv.data<T>();
      std::vector<T*> dy(static_cast<size_t>(X), nullptr);
      for (int64_t x = 0; x < X; ++x)
        if (input_of[x] >= 0 && node.needs_grad(static_cast<size_t>(input_of[x])))
          dy[x] = node.input_grad(static_cast<size_t>(input_of[x])).template data<T>();
      T* dg = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      // Each (token, slot) owns one expert row: no two tasks write the same element.
      parallel_for(0, n, row_grain(dim * k), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t)
          for (int64_t i = 0; i < k; ++i) {
            const int64_t x = e[t * k + i];
            const T* dot = dout + t * dim;
            if (dg) {
              const T* y = values[x].template data<T>() + row[t * k + i] * dim;
              T acc = 0;
              for (int64_t d = 0; d < dim; ++d) acc += dot[d] * y[d];
              dg[t * k + i] += acc;
            }
            if (dy[x]) {
              T* dyr = dy[x] + row[t * k + i] * dim;
              const T gi = g[t * k + i];
              for (int64_t d = 0; d < dim; ++d) dyr[d] += gi * dot[d];
            }
          }
      });
    });
  });
}

}  // namespace shamn
