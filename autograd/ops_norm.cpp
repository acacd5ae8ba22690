#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/kernels/rms_norm.h"
#include "core/profiler.h"

namespace shamn {

Var rms_norm(const Var& x, const Var& gain, double eps) {
  const ProfileScope profile("rms_norm", ProfileCategory::forward);
  SHAMN_CHECK(x.dim() >= 1 && gain.dim() == 1 && gain.size(0) == x.size(-1), "rms_norm: gain ",
              gain.value().str(), " does not match the last dim of ", x.value().str());
  SHAMN_CHECK(x.dtype() == gain.dtype(), "rms_norm: dtypes of x and gain differ");
  const int64_t dim = x.size(-1);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  record_work(op_work::rms_norm_forward(rows, dim, s));
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor rstd = Tensor::empty({rows}, x.dtype());
  dispatch_floating(x.dtype(), "rms_norm", [&](auto zero) {
    using T = decltype(zero);
    rms_norm_forward(out.data<T>(), rstd.data<T>(), x.value().data<T>(), gain.value().data<T>(), rows, dim,
                     static_cast<T>(eps));
  });
  const Tensor xv = x.value(), gv = gain.value();
  return record("rms_norm", out, {x, gain}, [=](Node& n) {
    record_work(op_work::rms_norm_backward(rows, dim, s, {n.needs_grad(0), n.needs_grad(1)}));
    dispatch_floating(n.out_dtype, "rms_norm", [&](auto zero) {
      using T = decltype(zero);
      bool fresh = false;
      T* dx = n.needs_grad(0) ? n.input_grad_to_write(0, &fresh).data<T>() : nullptr;
      T* dgain = n.needs_grad(1) ? n.input_grad(1).data<T>() : nullptr;
      rms_norm_backward(dx, dgain, n.out_grad.data<T>(), xv.data<T>(), gv.data<T>(), rstd.data<T>(), rows,
                        dim, fresh);
    });
  });
}

}  // namespace shamn
