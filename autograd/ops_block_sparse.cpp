#include "autograd/ops_block_sparse.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/buffer.h"
#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/rows.h"
#include "core/parallel.h"
#include "core/product_precision.h"
#include "core/profiler.h"

namespace shamn {
namespace {

BlockSparseDims checked_dims(const char* op, const Var& x, const Var& values, const Tensor& col_index,
                             const Var& bias, int64_t block) {
  SHAMN_CHECK(values.dim() == 4 && values.size(2) == block && values.size(3) == block, op, ": values ",
              values.value().str(), " are not [nob, a, ", block, ", ", block, "]");
  SHAMN_CHECK(col_index.dtype() == DType::i32 && col_index.dim() == 2 &&
                  col_index.size(0) == values.size(0) && col_index.size(1) == values.size(1),
              op, ": col_index ", col_index.str(), " does not match values ", values.value().str());
  BlockSparseDims dims;
  dims.block = block;
  dims.in = x.size(-1);
  dims.out = values.size(0) * block;
  dims.active = values.size(1);
  SHAMN_CHECK(dims.in % block == 0, op, ": input width ", dims.in, " is not a multiple of the block ", block);
  // The kernels index x and dx through col_index: a bad pattern must stop here.
  check_block_pattern(col_index.data<int32_t>(), dims);
  SHAMN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == dims.out), op, ": bias ",
              bias.defined() ? bias.value().str() : "", " does not match ", dims.out, " outputs");
  SHAMN_CHECK(x.dtype() == values.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), op,
              ": operand dtypes differ");
  return dims;
}

// x and the rows of it the kernels read, and as what (core/kernels/block_sparse.h).
template <class T>
struct RowsOf {
  const T* x = nullptr;
  RowSource src;
};

template <class T>
void forward_rows(T* y, const RowsOf<T>& x, const T* values, const int32_t* ci, const T* bias, int64_t n,
                  const BlockSparseDims& dims, const T* residual = nullptr) {
  // Under bf16 the kernels round the operands as they pack them.
  block_sparse_forward(y, x.x, values, ci, bias, n, dims, product_precision(), x.src, residual);
}

// Gradient destinations of one layer; null where no gradient is wanted.
// dx_fresh, dvalues_fresh: the buffer holds nothing to add to, so the gradient
// is written.
template <class T>
struct GradRows {
  T* dx = nullptr;
  bool dx_fresh = false;
  T* dvalues = nullptr;
  bool dvalues_fresh = false;
  T* dbias = nullptr;
};

template <class T>
void backward_rows(const GradRows<T>& g, const T* dy, const RowsOf<T>& x, const T* values, const int32_t* ci,
                   int64_t n, const BlockSparseDims& dims) {
  const ProductPrecision p = product_precision();
  if (g.dx) block_sparse_backward_input(g.dx, dy, values, ci, n, dims, p, g.dx_fresh);
  if (g.dvalues) block_sparse_backward_values(g.dvalues, dy, x.x, ci, n, dims, p, x.src, g.dvalues_fresh);
  if (g.dbias) block_sparse_backward_bias(g.dbias, dy, n, dims);  // a sum of dy: f32 under bf16 too
}

// dx += dact * act'(x), or dx = ... with overwrite (dact may be dx then).
template <class T>
void activation_backward(T* dx, const T* dact, const T* x, int64_t count, InputActivation act,
                         bool overwrite) {
  if (act == InputActivation::gelu)
    gelu_backward(dx, dact, x, count, overwrite);
  else
    silu_backward(dx, dact, x, count, overwrite);
}

// The work of computing act over count inputs (backward: again, and its gradient).
void record_activation_work(InputActivation act, int64_t count, int64_t s, bool input_grad) {
  if (act == InputActivation::none) return;
  const bool gelu = act == InputActivation::gelu;
  record_work(op_work::unary_forward(count, gelu ? op_work::kGeluFlops : op_work::kSiluFlops, s));
  if (input_grad)
    record_work(
        op_work::unary_backward(count, gelu ? op_work::kGeluBackwardFlops : op_work::kSiluBackwardFlops, s));
}

// Scratch of at least count values, rounded up to a power of two. Segment
// sizes change with the routing every step; the rounded sizes recur, so the
// allocator's cache hands the same blocks back instead of faulting in fresh ones.
template <class T>
void reserve_segment_scratch(Buffer<T>& buf, int64_t count) {
  buf.reserve_at_least(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(count))));
}

// y = act(x) and dx (+)= dact * act'(x) in one pass (dact may be dx).
template <class T>
void activation_forward_backward(T* y, T* dx, const T* dact, const T* x, int64_t count, InputActivation act,
                                 bool overwrite) {
  if (act == InputActivation::gelu)
    gelu_forward_backward(y, dx, dact, x, count, overwrite);
  else
    silu_forward_backward(y, dx, dact, x, count, overwrite);
}

// Activated inputs of at most this many elements are activated once in backward,
// into a scratch copy that the values' gradient then reads, beside act'(x); larger
// ones (the mixer's at its configured batch, 25M elements) are activated again
// by the values' kernels as they read x, and keep no copy.
constexpr int64_t kActivatedCopyMax = int64_t{1} << 22;

// backward_rows for a layer that read act(x) (x.src.act). The input's gradient
// goes through act'(x) into g.dx, which needs x's own rows (x.src.rows null). A
// fresh g.dx takes the product's gradient and is then scaled by act'(x) in
// place; else the product's gradient goes through dbuf (written, not
// zero-filled). When the values' gradient is wanted too, act(x) is computed in
// the same pass as act'(x) (one sigmoid instead of two) into hbuf for it, where
// that copy is small enough; else the values' kernels apply act again as they
// read x. The same bits either way.
template <class T>
void backward_rows_activated(const GradRows<T>& g, const T* dy, const RowsOf<T>& x, const T* values,
                             const int32_t* ci, int64_t n, const BlockSparseDims& dims, Buffer<T>& dbuf,
                             Buffer<T>& hbuf) {
  const InputActivation act = x.src.act;
  GradRows<T> inner = g;
  const bool through_act = act != InputActivation::none && g.dx;
  if (!through_act) return backward_rows<T>(inner, dy, x, values, ci, n, dims);
  SHAMN_CHECK(x.src.rows == nullptr, "block-sparse backward: an activated input must not be gathered");
  const int64_t count = n * dims.in;
  if (!g.dx_fresh) {
    reserve_segment_scratch(dbuf, count);
    inner.dx = dbuf.data();
  }
  inner.dx_fresh = true;
  if (!g.dvalues || count > kActivatedCopyMax) {
    backward_rows<T>(inner, dy, x, values, ci, n, dims);
    return activation_backward(g.dx, inner.dx, x.x, count, act, g.dx_fresh);
  }
  GradRows<T> input_only{inner.dx, true, nullptr, false, nullptr};
  backward_rows<T>(input_only, dy, x, values, ci, n, dims);
  reserve_segment_scratch(hbuf, count);
  activation_forward_backward(hbuf.data(), g.dx, inner.dx, x.x, count, act, g.dx_fresh);
  GradRows<T> rest = g;
  rest.dx = nullptr;
  backward_rows<T>(rest, dy, {hbuf.data(), {}}, values, ci, n, dims);
}

// A segment's n rows from r0 of x: x's own rows, or (rows given) rows[r0..r0+n)
// of x. The kernels gather and activate as they read, except that a gathered
// input with an activation is gathered into buf first (its backward needs the
// rows themselves; no layer of the model has both).
template <class T>
RowsOf<T> segment_rows(const T* x, const int32_t* rows, int64_t r0, int64_t n, int64_t in,
                       InputActivation act, Buffer<T>& buf) {
  if (rows == nullptr) return {x + r0 * in, {nullptr, act}};
  if (act == InputActivation::none) return {x, {rows + r0, act}};
  reserve_segment_scratch(buf, n * in);
  gather_rows_forward(buf.data(), x, rows + r0, n, in);
  return {buf.data(), {nullptr, act}};
}

}  // namespace

Var block_sparse_linear(const Var& x, const Var& values, const Tensor& col_index, const Var& bias,
                        int64_t block, InputActivation act, const Var& residual) {
  const ProfileScope profile("block_sparse_linear", ProfileCategory::forward);
  const BlockSparseDims dims = checked_dims("block_sparse_linear", x, values, col_index, bias, block);
  const int64_t n = x.numel() / dims.in;
  Shape out_shape = x.shape();
  out_shape.back() = dims.out;
  const bool with_residual = residual.defined();
  SHAMN_CHECK(!with_residual || (residual.shape() == out_shape && residual.dtype() == x.dtype()),
              "block_sparse_linear: residual ", with_residual ? residual.value().str() : "",
              " is not the output's shape and dtype");
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  record_work(op_work::block_sparse_forward(n, dims, bias.defined(), s, with_residual));
  record_activation_work(act, n * dims.in, s, false);
  Tensor y = Tensor::empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), "block_sparse_linear", [&](auto zero) {
    using T = decltype(zero);
    forward_rows<T>(y.data<T>(), {x.value().data<T>(), {nullptr, act}}, values.value().data<T>(),
                    col_index.data<int32_t>(), bias.defined() ? bias.value().data<T>() : nullptr, n, dims,
                    with_residual ? residual.value().data<T>() : nullptr);
  });

  std::vector<Var> inputs{x, values};
  if (bias.defined()) inputs.push_back(bias);
  if (with_residual) inputs.push_back(residual);
  const Tensor xv = x.value(), wv = values.value();
  const size_t bias_at = bias.defined() ? 2 : 0, residual_at = bias.defined() ? 3 : 2;
  return record("block_sparse_linear", y, inputs, [=](Node& node) {
    // The residual's gradient is dout itself: handed to its producer where it
    // can take it (as add does), else added below.
    const bool add_residual = with_residual && node.out_grad_to_add(residual_at);
    record_work(op_work::block_sparse_backward(
        n, dims, s, {node.needs_grad(0), node.needs_grad(1), bias_at != 0 && node.needs_grad(bias_at)},
        add_residual));
    record_activation_work(act, n * dims.in, s, node.needs_grad(0));
    dispatch_floating(node.out_dtype, "block_sparse_linear", [&](auto zero) {
      using T = decltype(zero);
      GradRows<T> g;
      if (node.needs_grad(0)) g.dx = node.input_grad_to_write(0, &g.dx_fresh).template data<T>();
      if (node.needs_grad(1)) g.dvalues = node.input_grad_to_write(1, &g.dvalues_fresh).template data<T>();
      if (bias_at != 0 && node.needs_grad(bias_at)) g.dbias = node.input_grad(bias_at).data<T>();
      Buffer<T> dbuf, hbuf;
      backward_rows_activated<T>(g, node.out_grad.data<T>(), {xv.data<T>(), {nullptr, act}}, wv.data<T>(),
                                 col_index.data<int32_t>(), n, dims, dbuf, hbuf);
    });
    if (add_residual) node.add_out_grad_to(residual_at);
  });
}

Var block_sparse_linear_segments(const Var& x, const std::vector<int64_t>& offsets,
                                 const std::vector<BlockSparseOperands>& layers, int64_t block,
                                 InputActivation act, const Tensor& rows) {
  const ProfileScope profile("block_sparse_linear_segments", ProfileCategory::forward);
  const int64_t G = static_cast<int64_t>(layers.size());
  SHAMN_CHECK(G > 0 && static_cast<int64_t>(offsets.size()) == G + 1,
              "block_sparse_linear_segments: ", offsets.size(), " offsets for ", G,
              " layers (want layers + 1)");
  SHAMN_CHECK(x.dim() == 2, "block_sparse_linear_segments: x must be 2-D, got ", x.value().str());
  const bool gathered = rows.defined();
  const int64_t M = gathered ? rows.numel() : x.size(0), R = x.size(0);
  if (gathered) {
    SHAMN_CHECK(rows.dtype() == DType::i32 && rows.dim() == 1, "block_sparse_linear_segments: rows ",
                rows.str(), " are not int32 [M]");
    check_row_indices(rows.data<int32_t>(), M, R, "block_sparse_linear_segments");
  }
  SHAMN_CHECK(offsets.front() == 0 && offsets.back() == M, "block_sparse_linear_segments: offsets span [",
              offsets.front(), ", ", offsets.back(), "), the input has ", M, " rows");
  std::vector<BlockSparseDims> dims;
  std::vector<Var> inputs{x};
  // Input positions of each layer's values and bias (-1: no bias).
  std::vector<std::pair<size_t, int64_t>> slot;
  for (int64_t g = 0; g < G; ++g) {
    const BlockSparseOperands& l = layers[static_cast<size_t>(g)];
    SHAMN_CHECK(offsets[g] <= offsets[g + 1], "block_sparse_linear_segments: offsets[", g + 1,
                "] = ", offsets[g + 1], " is below offsets[", g, "] = ", offsets[g]);
    dims.push_back(checked_dims("block_sparse_linear_segments", x, l.values, l.col_index, l.bias, block));
    // The segments run concurrently, each writing its layer's gradients.
    for (int64_t h = 0; h < g; ++h)
      SHAMN_CHECK(layers[static_cast<size_t>(h)].values.impl() != l.values.impl() &&
                      (!l.bias.defined() || layers[static_cast<size_t>(h)].bias.impl() != l.bias.impl()),
                  "block_sparse_linear_segments: layers ", h, " and ", g, " share a parameter");
    SHAMN_CHECK(dims.back().out == dims.front().out, "block_sparse_linear_segments: layer ", g, " has ",
                dims.back().out, " outputs, layer 0 has ", dims.front().out);
    slot.emplace_back(inputs.size(), -1);
    inputs.push_back(l.values);
    if (l.bias.defined()) {
      slot.back().second = static_cast<int64_t>(inputs.size());
      inputs.push_back(l.bias);
    }
  }
  const int64_t in = dims.front().in, out = dims.front().out;
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  if (profiling()) {
    std::vector<bool> has_bias;
    for (const BlockSparseOperands& l : layers) has_bias.push_back(l.bias.defined());
    record_work(op_work::block_sparse_segments_forward(op_work::segment_rows(offsets), dims, has_bias, s));
    record_activation_work(act, M * in, s, false);
    if (gathered) record_work(op_work::gather_rows_forward(M, R, in, s));
  }
  Tensor y = Tensor::empty({M, out}, x.dtype());
  std::vector<Tensor> wv, bv, ci;
  for (const BlockSparseOperands& l : layers) {
    wv.push_back(l.values.value());
    bv.push_back(l.bias.defined() ? l.bias.value() : Tensor());
    ci.push_back(l.col_index);
  }
  dispatch_floating(x.dtype(), "block_sparse_linear_segments", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.value().data<T>();
    const int32_t* rp = gathered ? rows.data<int32_t>() : nullptr;
    T* yp = y.data<T>();
    parallel_for(0, G, 1, [&](int64_t lo, int64_t hi) {
      Buffer<T> rows_buf;  // the segment's rows of x, where they must be gathered first
      for (int64_t g = lo; g < hi; ++g) {
        const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
        if (n == 0) continue;
        forward_rows<T>(yp + r0 * out, segment_rows(xp, rp, r0, n, in, act, rows_buf), wv[g].data<T>(),
                        ci[g].data<int32_t>(), bv[g].defined() ? bv[g].data<T>() : nullptr, n, dims[g]);
      }
    });
  });

  const Tensor xv = x.value();
  return record("block_sparse_linear_segments", y, inputs, [=](Node& node) {
    if (profiling()) {
      std::vector<GradsWanted> wanted(static_cast<size_t>(G));
      for (size_t g = 0; g < wanted.size(); ++g) {
        const auto [values_at, bias_at] = slot[g];
        wanted[g].b = node.needs_grad(values_at);
        wanted[g].c = bias_at >= 0 && node.needs_grad(static_cast<size_t>(bias_at));
      }
      record_work(op_work::block_sparse_segments_backward(op_work::segment_rows(offsets), dims, s,
                                                          node.needs_grad(0), wanted));
      record_activation_work(act, M * in, s, node.needs_grad(0));
      if (gathered) {
        record_work(op_work::gather_rows_forward(M, R, in, s));  // the rows again
        if (node.needs_grad(0)) record_work(op_work::gather_rows_backward(M, R, in, s));
      }
    }
    dispatch_floating(node.out_dtype, "block_sparse_linear_segments", [&](auto zero) {
      using T = decltype(zero);
      // Gradient buffers are fetched here, before the tasks start. Gathered rows
      // get theirs in input order first (written), scatter-added below. The
      // segments cover every row of dx, so a fresh dx is written, not zero-filled.
      Tensor dx_rows = gathered && node.needs_grad(0) ? Tensor::empty({M, in}, node.out_dtype) : Tensor();
      bool dx_fresh = gathered;
      T* dx = !node.needs_grad(0) ? nullptr
              : gathered          ? dx_rows.data<T>()
                                  : node.input_grad_to_write(0, &dx_fresh).data<T>();
      std::vector<GradRows<T>> grads(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) {
        if (offsets[g + 1] == offsets[g]) continue;
        const auto [values_at, bias_at] = slot[static_cast<size_t>(g)];
        if (dx) {
          grads[g].dx = dx + offsets[g] * in;
          grads[g].dx_fresh = dx_fresh;
        }
        // Written whole by the segment (n > 0 here): a fresh buffer is stored into,
        // not zero-filled first (the layers' values are distinct inputs, checked).
        if (node.needs_grad(values_at))
          grads[g].dvalues = node.input_grad_to_write(values_at, &grads[g].dvalues_fresh).template data<T>();
        if (bias_at >= 0 && node.needs_grad(static_cast<size_t>(bias_at)))
          grads[g].dbias = node.input_grad(static_cast<size_t>(bias_at)).data<T>();
      }
      const T* dy = node.out_grad.data<T>();
      const T* xp = xv.data<T>();
      const int32_t* rp = gathered ? rows.data<int32_t>() : nullptr;
      parallel_for(0, G, 1, [&](int64_t lo, int64_t hi) {
        // The gradient of act(x), act(x) itself, and the segment's rows where gathered first.
        Buffer<T> dbuf, hbuf, rows_buf;
        for (int64_t g = lo; g < hi; ++g) {
          const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
          if (n == 0) continue;
          backward_rows_activated<T>(grads[g], dy + r0 * out, segment_rows(xp, rp, r0, n, in, act, rows_buf),
                                     wv[g].data<T>(), ci[g].data<int32_t>(), n, dims[g], dbuf, hbuf);
        }
      });
      if (gathered && dx) {
        bool fresh = false;
        T* du = node.input_grad_to_write(0, &fresh).data<T>();
        scatter_add_rows(du, dx, rp, M, R, in, fresh);
      }
    });
  });
}

}  // namespace shamn
