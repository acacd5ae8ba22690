#include <cmath>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"
#include "core/profiler.h"

namespace shamn {
namespace {

// b must equal a's shape or a's trailing dims; returns b's element count (the row width).
int64_t broadcast_width(const char* op, const Var& a, const Var& b) {
  SHAMN_CHECK(a.dtype() == b.dtype(), op, ": operands ", a.value().str(), " and ", b.value().str(),
              " differ in dtype");
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const bool trailing = sb.size() <= sa.size() && std::equal(sb.begin(), sb.end(), sa.end() - sb.size());
  SHAMN_CHECK(trailing, op, ": cannot broadcast ", b.value().str(), " over ", a.value().str(),
              " (the second operand must match the first's trailing dims)");
  return b.numel();
}

enum class BinaryOp { add, sub, mul };

op_work::Binary work_kind(BinaryOp kind) {
  switch (kind) {
    case BinaryOp::add:
      return op_work::Binary::add;
    case BinaryOp::sub:
      return op_work::Binary::sub;
    case BinaryOp::mul:
      break;
  }
  return op_work::Binary::mul;
}

Var binary(const char* name, BinaryOp kind, const Var& a, const Var& b) {
  const ProfileScope profile(name, ProfileCategory::forward);
  const int64_t cols = broadcast_width(name, a, b);
  const int64_t rows = cols == 0 ? 0 : a.numel() / cols;
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::binary_forward(rows, cols, s));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_floating(a.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.value().data<T>();
    const T* pb = b.value().data<T>();
    T* po = out.data<T>();
    switch (kind) {
      case BinaryOp::add:
        broadcast_rows_forward(po, pa, pb, rows, cols, std::plus<T>());
        break;
      case BinaryOp::sub:
        broadcast_rows_forward(po, pa, pb, rows, cols, std::minus<T>());
        break;
      case BinaryOp::mul:
        broadcast_rows_forward(po, pa, pb, rows, cols, std::multiplies<T>());
        break;
    }
  });
  // mul's backward needs both values; add/sub need neither.
  const Tensor av = kind == BinaryOp::mul ? a.value() : Tensor();
  const Tensor bv = kind == BinaryOp::mul ? b.value() : Tensor();
  return record(name, out, {a, b}, [=](Node& n) {
    // add and sub hand dy itself to a's op where they can (no pass over it).
    const bool a_grad_to_add = kind == BinaryOp::mul ? n.needs_grad(0) : n.out_grad_to_add(0);
    record_work(op_work::binary_backward(work_kind(kind), rows, cols, s, {a_grad_to_add, n.needs_grad(1)}));
    dispatch_floating(n.out_dtype, name, [&](auto zero) {
      using T = decltype(zero);
      const T* dy = n.out_grad.data<T>();
      if (a_grad_to_add && kind == BinaryOp::mul) {  // da += dy * b (b broadcast)
        Tensor tmp = Tensor::empty({rows, cols}, n.out_dtype);
        broadcast_rows_forward(tmp.data<T>(), dy, bv.data<T>(), rows, cols, std::multiplies<T>());
        axpy(n.input_grad(0).data<T>(), tmp.data<T>(), T(1), rows * cols);
      } else if (a_grad_to_add) {
        n.add_out_grad_to(0);
      }
      if (n.needs_grad(1) && kind == BinaryOp::add && rows == 1) {
        // b has a's shape: its gradient is dy itself, stored into a fresh buffer
        // (no zero fill and add) or added to one in use.
        bool fresh = false;
        T* db = n.input_grad_to_write(1, &fresh).data<T>();
        if (fresh)
          map_forward(db, dy, cols, [](T v) { return v; });
        else
          axpy(db, dy, T(1), cols);
      } else if (n.needs_grad(1)) {
        T* db = n.input_grad(1).data<T>();
        switch (kind) {
          case BinaryOp::add:
            sum_rows_accumulate<T>(db, dy, nullptr, rows, cols);
            break;
          case BinaryOp::mul:
            sum_rows_accumulate<T>(db, dy, av.data<T>(), rows, cols);
            break;
          case BinaryOp::sub: {
            Tensor tmp = Tensor::zeros({cols}, n.out_dtype);
            sum_rows_accumulate<T>(tmp.data<T>(), dy, nullptr, rows, cols);
            axpy(db, tmp.data<T>(), T(-1), cols);
            break;
          }
        }
      }
    });
  });
}

// An element-wise activation: the kernels of core/kernels/activation.h, vectorised
// for f32 and the obvious scalar formulas for f64.
template <class Fn>
Var unary(const char* name, const Var& a) {
  const ProfileScope profile(name, ProfileCategory::forward);
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::unary_forward(a.numel(), Fn::kFlops, s));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_floating(a.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    Fn::forward(out.data<T>(), a.value().data<T>(), a.numel());
  });
  const Tensor in = a.value();
  return record(name, out, {a}, [=](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::unary_backward(in.numel(), Fn::kBackwardFlops, s));
    dispatch_floating(n.out_dtype, name, [&](auto zero) {
      using T = decltype(zero);
      Fn::backward(n.input_grad(0).data<T>(), n.out_grad.data<T>(), in.data<T>(), out.data<T>(), in.numel());
    });
  });
}

// backward(dx, dy, x, y, n): each takes the input or the output it needs.
struct GeluFn {
  static constexpr int64_t kFlops = op_work::kGeluFlops, kBackwardFlops = op_work::kGeluBackwardFlops;
  template <class T>
  static void forward(T* y, const T* x, int64_t n) {
    gelu_forward(y, x, n);
  }
  template <class T>
  static void backward(T* dx, const T* dy, const T* x, const T*, int64_t n) {
    gelu_backward(dx, dy, x, n);
  }
};
struct SiluFn {
  static constexpr int64_t kFlops = op_work::kSiluFlops, kBackwardFlops = op_work::kSiluBackwardFlops;
  template <class T>
  static void forward(T* y, const T* x, int64_t n) {
    silu_forward(y, x, n);
  }
  template <class T>
  static void backward(T* dx, const T* dy, const T* x, const T*, int64_t n) {
    silu_backward(dx, dy, x, n);
  }
};
struct SigmoidFn {
  static constexpr int64_t kFlops = op_work::kSigmoidFlops, kBackwardFlops = op_work::kSigmoidBackwardFlops;
  template <class T>
  static void forward(T* y, const T* x, int64_t n) {
    sigmoid_forward(y, x, n);
  }
  template <class T>
  static void backward(T* dx, const T* dy, const T*, const T* y, int64_t n) {
    sigmoid_backward(dx, dy, y, n);
  }
};

}  // namespace

Var add(const Var& a, const Var& b) { return binary("add", BinaryOp::add, a, b); }
Var sub(const Var& a, const Var& b) { return binary("sub", BinaryOp::sub, a, b); }
Var mul(const Var& a, const Var& b) { return binary("mul", BinaryOp::mul, a, b); }

Var scale(const Var& a, double factor) {
  const ProfileScope profile("scale", ProfileCategory::forward);
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::scale(a.numel(), s));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_floating(a.dtype(), "scale", [&](auto zero) {
    using T = decltype(zero);
    const T f = static_cast<T>(factor);
    map_forward(out.data<T>(), a.value().data<T>(), a.numel(), [f](T x) { return f * x; });
  });
  return record("scale", out, {a}, [factor, s](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::scale(n.out_grad.numel(), s));
    dispatch_floating(n.out_dtype, "scale", [&](auto zero) {
      using T = decltype(zero);
      axpy(n.input_grad(0).data<T>(), n.out_grad.data<T>(), static_cast<T>(factor), n.out_grad.numel());
    });
  });
}

Var gelu(const Var& a) { return unary<GeluFn>("gelu", a); }
Var silu(const Var& a) { return unary<SiluFn>("silu", a); }
Var sigmoid(const Var& a) { return unary<SigmoidFn>("sigmoid", a); }

}  // namespace shamn
