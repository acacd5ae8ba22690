#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace shamn {
namespace {

// Sum of all elements accumulated in double over fixed chunks (thread-count independent).
template <class T>
double total(const Tensor& t) {
  const T* p = t.data<T>();
  return parallel_sum(0, t.numel(), 1 << 15, [p](int64_t lo, int64_t hi) {
    double s = 0;
    for (int64_t i = lo; i < hi; ++i) s += p[i];
    return s;
  });
}

Var reduce_all(const char* name, const Var& a, double factor) {
  const ProfileScope profile(name, ProfileCategory::forward);
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::reduce_forward(a.numel(), s));
  Tensor out = Tensor::empty({}, a.dtype());
  dispatch_floating(a.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    out.data<T>()[0] = static_cast<T>(factor * total<T>(a.value()));
  });
  const int64_t count = a.numel();
  return record(name, out, {a}, [name, factor, s, count](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::reduce_backward(count, s));
    dispatch_floating(n.out_dtype, name, [&](auto zero) {
      using T = decltype(zero);
      Tensor& da = n.input_grad(0);
      T* p = da.data<T>();
      const T g = static_cast<T>(factor) * n.out_grad.data<T>()[0];
      parallel_for(0, da.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] += g;
      });
    });
  });
}

}  // namespace

Var sum(const Var& a) { return reduce_all("sum", a, 1.0); }
Var mean(const Var& a) {
  SHAMN_CHECK(a.numel() > 0, "mean of an empty tensor ", a.value().str());
  return reduce_all("mean", a, 1.0 / static_cast<double>(a.numel()));
}

}  // namespace shamn
