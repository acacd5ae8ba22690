#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/kernels/softmax.h"
#include "core/profiler.h"

namespace shamn {
namespace {

template <bool kLog>
Var softmax_like(const char* name, const Var& a) {
  const ProfileScope profile(name, ProfileCategory::forward);
  SHAMN_CHECK(a.dim() >= 1, name, " of a scalar");
  const int64_t cols = a.size(-1);
  const int64_t rows = cols == 0 ? 0 : a.numel() / cols;
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::softmax_forward(rows * cols, s));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_floating(a.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (kLog)
      log_softmax_forward(out.data<T>(), a.value().data<T>(), rows, cols);
    else
      softmax_forward(out.data<T>(), a.value().data<T>(), rows, cols);
  });
  return record(name, out, {a}, [=](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::softmax_backward(rows * cols, s));
    dispatch_floating(n.out_dtype, name, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (kLog)
        log_softmax_backward(n.input_grad(0).data<T>(), n.out_grad.data<T>(), out.data<T>(), rows, cols);
      else
        softmax_backward(n.input_grad(0).data<T>(), n.out_grad.data<T>(), out.data<T>(), rows, cols);
    });
  });
}

}  // namespace

Var softmax(const Var& a) { return softmax_like<false>("softmax", a); }
Var log_softmax(const Var& a) { return softmax_like<true>("log_softmax", a); }

Var cross_entropy(const Var& logits, const Tensor& targets) {
  const ProfileScope profile("cross_entropy", ProfileCategory::forward);
  SHAMN_CHECK(targets.defined() && targets.dtype() == DType::i32,
              "cross_entropy: targets must be an int32 tensor, got ", targets.str());
  SHAMN_CHECK(logits.dim() >= 1 && Shape(logits.shape().begin(), logits.shape().end() - 1) == targets.shape(),
              "cross_entropy: logits ", logits.value().str(), " do not match targets ", targets.str());
  const int64_t vocab = logits.size(-1);
  const int64_t rows = targets.numel();
  SHAMN_CHECK(rows > 0, "cross_entropy over zero positions");
  const int64_t s = static_cast<int64_t>(dtype_size(logits.dtype()));
  record_work(op_work::cross_entropy_forward(rows, vocab, s));
  Tensor max_and_log_sum = Tensor::empty({2, rows}, logits.dtype());
  Tensor out = Tensor::empty({}, logits.dtype());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    Tensor losses = Tensor::empty({rows}, logits.dtype());
    T* saved = max_and_log_sum.data<T>();
    cross_entropy_forward(losses.data<T>(), saved, saved + rows, logits.value().data<T>(),
                          targets.data<int32_t>(), rows, vocab);
    double total = 0;  // in position order: the same for any thread count
    for (int64_t r = 0; r < rows; ++r) total += losses.data<T>()[r];
    out.data<T>()[0] = static_cast<T>(total / static_cast<double>(rows));
  });
  const Tensor x = logits.value();
  return record("cross_entropy", out, {logits}, [=](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::cross_entropy_backward(rows, vocab, s));
    dispatch_floating(n.out_dtype, "cross_entropy", [&](auto zero) {
      using T = decltype(zero);
      Tensor dloss = Tensor::full({rows}, static_cast<double>(n.out_grad.data<T>()[0]) / rows, n.out_dtype);
      const T* saved = max_and_log_sum.data<T>();
      cross_entropy_backward(n.input_grad(0).data<T>(), dloss.data<T>(), x.data<T>(), saved, saved + rows,
                             targets.data<int32_t>(), rows, vocab);
    });
  });
}

}  // namespace shamn
