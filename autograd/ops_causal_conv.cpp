#include "autograd/ops_causal_conv.h"

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/kernels/causal_conv.h"
#include "core/profiler.h"

namespace shamn {

Var causal_conv(const Var& u, const Var& conv) {
  const ProfileScope profile("causal_conv", ProfileCategory::forward);
  SHAMN_CHECK(u.dim() == 3, "causal_conv: u must be [B, T, D], got ", u.value().str());
  SHAMN_CHECK(conv.dim() == 2 && conv.size(0) == u.size(2) && conv.size(1) >= 1,
              "causal_conv: conv must be [D, K] with D = ", u.size(2), " and K >= 1, got ",
              conv.value().str());
  SHAMN_CHECK(u.dtype() == conv.dtype(), "causal_conv: u is ", dtype_name(u.dtype()), " but conv is ",
              dtype_name(conv.dtype()));
  CausalConvDims s;
  s.batch = u.size(0);
  s.time = u.size(1);
  s.dim = u.size(2);
  s.kernel = conv.size(1);
  const int64_t es = static_cast<int64_t>(dtype_size(u.dtype()));
  record_work(op_work::causal_conv_forward(u.numel(), s.dim, s.kernel, es));
  Tensor c = Tensor::empty(u.shape(), u.dtype());
  const Tensor uv = u.value(), wv = conv.value();
  dispatch_floating(u.dtype(), "causal_conv", [&](auto zero) {
    using T = decltype(zero);
    causal_conv_forward(c.data<T>(), uv.data<T>(), wv.data<T>(), s);
  });
  return record("causal_conv", c, {u, conv}, [=](Node& node) {
    record_work(op_work::causal_conv_backward(s.batch * s.time * s.dim, s.dim, s.kernel, es,
                                              {node.needs_grad(0), node.needs_grad(1)}));
    dispatch_floating(node.out_dtype, "causal_conv", [&](auto zero) {
      using T = decltype(zero);
      const T* dc = node.out_grad.data<T>();
      if (node.needs_grad(0) && node.needs_grad(1)) {
        bool fresh = false;
        T* du = node.input_grad_to_write(0, &fresh).data<T>();
        causal_conv_backward(du, node.input_grad(1).data<T>(), dc, uv.data<T>(), wv.data<T>(), s, fresh);
        return;
      }
      if (node.needs_grad(0)) {
        bool fresh = false;  // every element of du is written: store into a fresh buffer
        T* du = node.input_grad_to_write(0, &fresh).data<T>();
        causal_conv_backward_input(du, dc, wv.data<T>(), s, fresh);
      }
      if (node.needs_grad(1)) {
        T* dw = node.input_grad(1).data<T>();
        causal_conv_backward_kernel(dw, dc, uv.data<T>(), s);
      }
    });
  });
}

}  // namespace shamn
