#include "autograd/ops_lora.h"

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/gemm.h"
#include "core/kernels/elementwise.h"
#include "core/profiler.h"

namespace shamn {

Var add_low_rank_segments(const Var& y_in, const Var& x, const std::vector<int64_t>& offsets,
                          const std::vector<LowRankOperands>& adapters, double scale) {
  const ProfileScope profile("add_low_rank_segments", ProfileCategory::forward);
  const int64_t G = static_cast<int64_t>(adapters.size());
  SHAMN_CHECK(G > 0 && static_cast<int64_t>(offsets.size()) == G + 1,
              "add_low_rank_segments: ", offsets.size(), " offsets for ", G, " adapters (want adapters + 1)");
  SHAMN_CHECK(x.dim() == 2, "add_low_rank_segments: x must be 2-D, got ", x.value().str());
  SHAMN_CHECK(offsets.front() == 0 && offsets.back() == x.size(0), "add_low_rank_segments: offsets span [",
              offsets.front(), ", ", offsets.back(), "), x has ", x.size(0), " rows");
  SHAMN_CHECK(y_in.dim() == 2 && y_in.size(0) == x.size(0) && y_in.dtype() == x.dtype(),
              "add_low_rank_segments: y ", y_in.value().str(), " does not match x ", x.value().str());
  SHAMN_CHECK(
      !(y_in.is_leaf() && y_in.requires_grad()),
      "add_low_rank_segments: y is summed into in place, so it cannot be a leaf that needs a gradient");
  const int64_t in = x.size(1), out = y_in.size(1);
  std::vector<Var> inputs{x, y_in};
  std::vector<int64_t> rank(static_cast<size_t>(G), 0);
  std::vector<size_t> slot(static_cast<size_t>(G), 0);  // input position of a (b follows)
  for (int64_t g = 0; g < G; ++g) {
    const LowRankOperands& l = adapters[static_cast<size_t>(g)];
    SHAMN_CHECK(offsets[g] <= offsets[g + 1], "add_low_rank_segments: offsets[", g + 1,
                "] = ", offsets[g + 1], " is below offsets[", g, "] = ", offsets[g]);
    SHAMN_CHECK(l.a.defined() == l.b.defined(), "add_low_rank_segments: adapter ", g,
                " has only one of A and B");
    if (!l.a.defined()) continue;
    SHAMN_CHECK(l.a.dim() == 2 && l.b.dim() == 2 && l.a.size(1) == in && l.b.size(0) == out &&
                    l.b.size(1) == l.a.size(0),
                "add_low_rank_segments: adapter ", g, " has A ", l.a.value().str(), " and B ",
                l.b.value().str(), "; want A [rank, ", in, "] and B [", out, ", rank]");
    SHAMN_CHECK(l.a.dtype() == x.dtype() && l.b.dtype() == x.dtype(),
                "add_low_rank_segments: operand dtypes differ");
    rank[static_cast<size_t>(g)] = l.a.size(0);
    slot[static_cast<size_t>(g)] = inputs.size();
    inputs.push_back(l.a);
    inputs.push_back(l.b);
  }
  // t: [M, rank_g] per segment, packed one segment after another (row offsets
  // offsets[g], row width rank[g]: segment g starts at t_at[g]).
  std::vector<int64_t> t_at(static_cast<size_t>(G) + 1, 0);
  for (int64_t g = 0; g < G; ++g) t_at[g + 1] = t_at[g] + (offsets[g + 1] - offsets[g]) * rank[g];
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  if (profiling()) record_work(op_work::low_rank_forward(op_work::segment_rows(offsets), rank, in, out, s));
  Tensor t = Tensor::empty({t_at.back()}, x.dtype());
  Tensor y = y_in.value();  // summed into in place
  dispatch_floating(x.dtype(), "add_low_rank_segments", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.value().data<T>();
    // One segment after another: each GEMM is parallel inside (no nested loops of tasks).
    for (int64_t g = 0; g < G; ++g) {
      const int64_t n = offsets[g + 1] - offsets[g], r = rank[g];
      if (n == 0 || r == 0) continue;
      const LowRankOperands& l = adapters[static_cast<size_t>(g)];
      T* tg = t.data<T>() + t_at[g];
      // t_g[n, r] = x_g[n, in] A^T;  y_g[n, out] += scale * t_g B^T
      gemm(Trans::no, Trans::yes, n, r, in, T(1), xp + offsets[g] * in, in, l.a.value().data<T>(), in, T(0),
           tg, r);
      gemm(Trans::no, Trans::yes, n, out, r, static_cast<T>(scale), tg, r, l.b.value().data<T>(), r, T(1),
           y.data<T>() + offsets[g] * out, out);
    }
  });

  const Tensor xv = x.value();
  std::vector<Tensor> av, bv;
  for (const LowRankOperands& l : adapters) {
    av.push_back(l.a.defined() ? l.a.value() : Tensor());
    bv.push_back(l.b.defined() ? l.b.value() : Tensor());
  }
  return record("add_low_rank_segments", y, inputs, [=](Node& node) {
    if (profiling()) {
      bool adapters_wanted = false;
      for (int64_t g = 0; g < G; ++g)
        if (rank[g] > 0)
          adapters_wanted = adapters_wanted || node.needs_grad(slot[static_cast<size_t>(g)]) ||
                            node.needs_grad(slot[static_cast<size_t>(g)] + 1);
      record_work(op_work::low_rank_backward(op_work::segment_rows(offsets), rank, in, out, s,
                                             {node.needs_grad(0), adapters_wanted, node.needs_grad(1)}));
    }
    dispatch_floating(node.out_dtype, "add_low_rank_segments", [&](auto zero) {
      using T = decltype(zero);
      const T* dy = node.out_grad.data<T>();
      const T* xp = xv.data<T>();
      if (node.needs_grad(1)) axpy(node.input_grad(1).data<T>(), dy, T(1), node.out_grad.numel());
      T* dx = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t n = offsets[g + 1] - offsets[g], r = rank[g];
        if (n == 0 || r == 0) continue;
        const size_t ia = slot[static_cast<size_t>(g)], ib = ia + 1;
        const T* dyg = dy + offsets[g] * out;
        const T* xg = xp + offsets[g] * in;
        const T* tg = t.data<T>() + t_at[g];
        const T* A = av[static_cast<size_t>(g)].data<T>();
        const T* B = bv[static_cast<size_t>(g)].data<T>();
        // dB[out, r] += scale * dy_g^T t_g
        if (node.needs_grad(ib))
          gemm(Trans::yes, Trans::no, out, r, n, static_cast<T>(scale), dyg, out, tg, r, T(1),
               node.input_grad(ib).data<T>(), r);
        if (!node.needs_grad(ia) && !dx) continue;
        // dt[n, r] = scale * dy_g B
        std::vector<T> dt(static_cast<size_t>(n * r));
        gemm(Trans::no, Trans::no, n, r, out, static_cast<T>(scale), dyg, out, B, r, T(0), dt.data(), r);
        // dA[r, in] += dt^T x_g;  dx_g[n, in] += dt A
        if (node.needs_grad(ia))
          gemm(Trans::yes, Trans::no, r, in, n, T(1), dt.data(), r, xg, in, T(1),
               node.input_grad(ia).data<T>(), in);
        if (dx)
          gemm(Trans::no, Trans::no, n, in, r, T(1), dt.data(), r, A, in, T(1), dx + offsets[g] * in, in);
      }
    });
  });
}

}  // namespace shamn
