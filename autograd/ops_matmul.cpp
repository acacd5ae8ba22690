#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/product_precision.h"
#include "core/profiler.h"

namespace shamn {

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b) {
  const ProfileScope profile("matmul", ProfileCategory::forward);
  SHAMN_CHECK(a.dtype() == b.dtype(), "matmul: operands ", a.value().str(), " and ", b.value().str(),
              " differ in dtype");
  SHAMN_CHECK(b.dim() == 2, "matmul: second operand must be 2-D, got ", b.value().str());
  SHAMN_CHECK(a.dim() >= 1 && (!trans_a || a.dim() == 2),
              "matmul: a transposed first operand must be 2-D, got ", a.value().str());
  const int64_t K = trans_a ? a.size(0) : a.size(-1);
  const int64_t M = a.numel() / std::max<int64_t>(K, 1);
  const int64_t N = trans_b ? b.size(0) : b.size(1);
  SHAMN_CHECK((trans_b ? b.size(1) : b.size(0)) == K, "matmul: inner dimensions differ: ", a.value().str(),
              (trans_a ? "^T" : ""), " @ ", b.value().str(), (trans_b ? "^T" : ""));
  Shape out_shape;
  if (trans_a) {
    out_shape = {M, N};
  } else {
    out_shape.assign(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(N);
  }
  const Trans ta = trans_a ? Trans::yes : Trans::no;
  const Trans tb = trans_b ? Trans::yes : Trans::no;
  const int64_t lda = trans_a ? M : K;
  const int64_t ldb = trans_b ? K : N;

  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::matmul_forward(M, N, K, s));
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_floating(a.dtype(), "matmul", [&](auto zero) {
    using T = decltype(zero);
    // Under bf16 the GEMM rounds its operands as it packs them.
    gemm(ta, tb, M, N, K, T(1), a.value().data<T>(), lda, b.value().data<T>(), ldb, T(0), out.data<T>(), N,
         product_precision());
  });

  const Tensor av = a.value(), bv = b.value();
  return record("matmul", out, {a, b}, [=](Node& n) {
    record_work(op_work::matmul_backward(M, N, K, s, {n.needs_grad(0), n.needs_grad(1)}));
    dispatch_floating(av.dtype(), "matmul", [&](auto zero) {
      using T = decltype(zero);
      const T* A = av.data<T>();
      const T* B = bv.data<T>();
      const T* dC = n.out_grad.data<T>();  // [M, N]
      const ProductPrecision p = product_precision();
      // Each product writes its whole gradient: into a fresh buffer with beta 0
      // (no zero fill first), else added with beta 1. Input 0 is done before input
      // 1 is fetched, so matmul(a, a) adds the second product to the first.
      bool fresh = false;
      if (n.needs_grad(0)) {
        T* dA = n.input_grad_to_write(0, &fresh).data<T>();
        const T beta = fresh ? T(0) : T(1);
        if (!trans_a)  // dA[M,K] += dC[M,N] op(B)^T
          gemm(Trans::no, trans_b ? Trans::no : Trans::yes, M, K, N, T(1), dC, N, B, ldb, beta, dA, K, p);
        else  // dA_stored[K,M] += op(B)[K,N] dC^T
          gemm(tb, Trans::yes, K, M, N, T(1), B, ldb, dC, N, beta, dA, M, p);
      }
      if (n.needs_grad(1)) {
        T* dB = n.input_grad_to_write(1, &fresh).data<T>();
        const T beta = fresh ? T(0) : T(1);
        if (!trans_b)  // dB[K,N] += op(A)^T dC
          gemm(trans_a ? Trans::no : Trans::yes, Trans::no, K, N, M, T(1), A, lda, dC, N, beta, dB, N, p);
        else  // dB_stored[N,K] += dC^T op(A)
          gemm(Trans::yes, ta, N, K, M, T(1), dC, N, A, lda, beta, dB, K, p);
      }
    });
  });
}

}  // namespace shamn
