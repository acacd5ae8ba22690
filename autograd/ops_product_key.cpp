#include "autograd/ops_product_key.h"

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/kernels/elementwise.h"
#include "core/profiler.h"

namespace shamn {

Var product_key_memory(const Var& q, const Var& keys1, const Var& keys2, const Var& values, int64_t topk,
                       const Var& residual) {
  const ProfileScope profile("product_key_memory", ProfileCategory::forward);
  SHAMN_CHECK(q.dim() >= 1 && q.size(-1) >= 2 && q.size(-1) % 2 == 0, "product_key_memory: query ",
              q.value().str(), " must end in key_dim = 2*dh, an even width of at least 2 (memory.key_dim)");
  const int64_t dh = q.size(-1) / 2;
  SHAMN_CHECK(keys1.dim() == 2 && keys1.size(1) == dh, "product_key_memory: keys1 ", keys1.value().str(),
              " is not [n, ", dh, "] for a query of width ", 2 * dh);
  SHAMN_CHECK(keys2.shape() == keys1.shape(), "product_key_memory: keys2 ", keys2.value().str(),
              " differs from keys1 ", keys1.value().str());
  ProductKeyDims d;
  d.n = keys1.size(0);
  d.dh = dh;
  d.k = topk;
  SHAMN_CHECK(values.dim() == 2 && values.size(0) == d.n * d.n, "product_key_memory: values ",
              values.value().str(), " must have n*n = ", d.n * d.n, " rows for ", d.n, " keys per half");
  d.dim = values.size(1);
  check_product_key_dims(d);
  SHAMN_CHECK(q.dtype() == keys1.dtype() && q.dtype() == keys2.dtype() && q.dtype() == values.dtype(),
              "product_key_memory: operand dtypes differ");

  const int64_t N = q.numel() / (2 * dh);
  Shape out_shape = q.shape();
  out_shape.back() = d.dim;
  const bool with_residual = residual.defined();
  SHAMN_CHECK(!with_residual || (residual.shape() == out_shape && residual.dtype() == q.dtype()),
              "product_key_memory: residual ", with_residual ? residual.value().str() : "",
              " is not the output's shape and dtype");
  const int64_t s = static_cast<int64_t>(dtype_size(q.dtype()));
  record_work(op_work::product_key_forward(N, d, s, with_residual));
  Tensor out = Tensor::empty(out_shape, q.dtype());
  Tensor slots = Tensor::empty({N, d.k}, DType::i32);
  Tensor weights = Tensor::empty({N, d.k}, q.dtype());
  const Tensor qv = q.value(), k1 = keys1.value(), k2 = keys2.value(), vv = values.value();
  dispatch_floating(q.dtype(), "product_key_memory", [&](auto zero) {
    using T = decltype(zero);
    product_key_forward(out.data<T>(), slots.data<int32_t>(), weights.data<T>(), qv.data<T>(), k1.data<T>(),
                        k2.data<T>(), vv.data<T>(), N, d,
                        with_residual ? residual.value().data<T>() : nullptr);
  });

  std::vector<Var> inputs{q, keys1, keys2, values};
  if (with_residual) inputs.push_back(residual);
  return record("product_key_memory", out, std::move(inputs), [=](Node& node) {
    // The residual's gradient is dout itself: handed to its producer where it
    // can take it (as add does), else added below.
    const bool add_residual = with_residual && node.out_grad_to_add(4);
    record_work(op_work::product_key_backward(N, d, s, node.needs_grad(0),
                                              node.needs_grad(1) || node.needs_grad(2), node.needs_grad(3),
                                              add_residual));
    dispatch_floating(node.out_dtype, "product_key_memory", [&](auto zero) {
      using T = decltype(zero);
      T* dq = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      T* dk1 = node.needs_grad(1) ? node.input_grad(1).data<T>() : nullptr;
      T* dk2 = node.needs_grad(2) ? node.input_grad(2).data<T>() : nullptr;
      // The values' gradient (the memory bank, 134 MB at the default size) is
      // written, not added, when nothing is in it yet: no zero fill first.
      bool fresh = false;
      T* dv = node.needs_grad(3) ? node.input_grad_to_write(3, &fresh).data<T>() : nullptr;
      const T* dout = node.out_grad.data<T>();
      product_key_backward(dq, dk1, dk2, dv, dout, qv.data<T>(), k1.data<T>(), k2.data<T>(), vv.data<T>(),
                           slots.data<int32_t>(), weights.data<T>(), N, d, fresh);
    });
    if (add_residual) node.add_out_grad_to(4);
  });
}

}  // namespace shamn
