#include <cstring>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "autograd/ops.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/rows.h"
#include "core/profiler.h"

namespace shamn {
namespace {

// Copies columns [begin, begin+width) of src rows into dst rows (or adds them).
// src: [R, src_cols]  dst: [R, dst_cols]; dst column offset dst_begin.
template <class T, bool kAccumulate>
void copy_columns(T* dst, int64_t dst_cols, int64_t dst_begin, const T* src, int64_t src_cols,
                  int64_t src_begin, int64_t rows, int64_t width) {
  parallel_for(0, rows, row_grain(width), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* d = dst + r * dst_cols + dst_begin;
      const T* s = src + r * src_cols + src_begin;
      if constexpr (kAccumulate) {
        for (int64_t c = 0; c < width; ++c) d[c] += s[c];
      } else {
        std::memcpy(d, s, sizeof(T) * static_cast<size_t>(width));
      }
    }
  });
}

Shape with_last(const Shape& shape, int64_t last) {
  Shape out = shape;
  out.back() = last;
  return out;
}

void check_indices_dtype(const Tensor& indices, const char* op) {
  SHAMN_CHECK(indices.defined() && indices.dtype() == DType::i32, op,
              ": indices must be an int32 tensor, got ", indices.str());
}

}  // namespace

Var reshape(const Var& a, const Shape& shape) {
  const ProfileScope profile("reshape", ProfileCategory::forward);
  Tensor out = a.value().reshape(shape);
  return record("reshape", out, {a}, [](Node& n) {
    if (!n.needs_grad(0)) return;
    if (n.pass_grad_to_input(0)) return;
    record_work(op_work::copy(n.out_grad.numel(), static_cast<int64_t>(dtype_size(n.out_dtype))));
    n.add_out_grad_to(0);
  });
}

Var slice_last(const Var& a, int64_t begin, int64_t end) {
  const ProfileScope profile("slice_last", ProfileCategory::forward);
  SHAMN_CHECK(a.dim() >= 1, "slice_last of a scalar");
  const int64_t cols = a.size(-1);
  SHAMN_CHECK(0 <= begin && begin <= end && end <= cols, "slice_last [", begin, ", ", end,
              ") out of range for ", a.value().str());
  const int64_t rows = cols == 0 ? 0 : a.numel() / cols;
  const int64_t width = end - begin;
  const int64_t s = static_cast<int64_t>(dtype_size(a.dtype()));
  record_work(op_work::copy(rows * width, s));
  Tensor out = Tensor::empty(with_last(a.shape(), width), a.dtype());
  dispatch_floating(a.dtype(), "slice_last", [&](auto zero) {
    using T = decltype(zero);
    copy_columns<T, false>(out.data<T>(), width, 0, a.value().data<T>(), cols, begin, rows, width);
  });
  return record("slice_last", out, {a}, [=](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::copy(rows * width, s));
    dispatch_floating(n.out_dtype, "slice_last", [&](auto zero) {
      using T = decltype(zero);
      copy_columns<T, true>(n.input_grad(0).data<T>(), cols, begin, n.out_grad.data<T>(), width, 0, rows,
                            width);
    });
  });
}

Var concat_last(const std::vector<Var>& parts) {
  const ProfileScope profile("concat_last", ProfileCategory::forward);
  SHAMN_CHECK(!parts.empty(), "concat_last of no tensors");
  const Var& first = parts.front();
  SHAMN_CHECK(first.dim() >= 1, "concat_last of scalars");
  const Shape lead(first.shape().begin(), first.shape().end() - 1);
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Var& p : parts) {
    SHAMN_CHECK(p.dtype() == first.dtype() && p.dim() == first.dim() &&
                    Shape(p.shape().begin(), p.shape().end() - 1) == lead,
                "concat_last: ", p.value().str(), " does not match ", first.value().str(),
                " outside the last dim");
    offsets.push_back(total);
    total += p.size(-1);
  }
  const int64_t rows = shape_numel(lead);
  const int64_t s = static_cast<int64_t>(dtype_size(first.dtype()));
  record_work(op_work::copy(rows * total, s));
  Tensor out = Tensor::empty(with_last(first.shape(), total), first.dtype());
  dispatch_floating(first.dtype(), "concat_last", [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < parts.size(); ++i)
      copy_columns<T, false>(out.data<T>(), total, offsets[i], parts[i].value().data<T>(), parts[i].size(-1),
                             0, rows, parts[i].size(-1));
  });
  std::vector<int64_t> widths;
  for (const Var& p : parts) widths.push_back(p.size(-1));
  return record("concat_last", out, parts, [=](Node& n) {
    record_work(op_work::copy(rows * total, s));
    dispatch_floating(n.out_dtype, "concat_last", [&](auto zero) {
      using T = decltype(zero);
      for (size_t i = 0; i < widths.size(); ++i)
        if (n.needs_grad(i))
          copy_columns<T, true>(n.input_grad(i).data<T>(), widths[i], 0, n.out_grad.data<T>(), total,
                                offsets[i], rows, widths[i]);
    });
  });
}

Var gather_rows(const Var& table, const Tensor& indices) {
  const ProfileScope profile("gather_rows", ProfileCategory::forward);
  check_indices_dtype(indices, "gather_rows");
  SHAMN_CHECK(table.dim() == 2, "gather_rows: table must be 2-D, got ", table.value().str());
  const int64_t num_rows = table.size(0), dim = table.size(1), n = indices.numel();
  check_row_indices(indices.data<int32_t>(), n, num_rows, "gather_rows");
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  const int64_t s = static_cast<int64_t>(dtype_size(table.dtype()));
  record_work(op_work::gather_rows_forward(n, num_rows, dim, s));
  Tensor out = Tensor::empty(out_shape, table.dtype());
  dispatch_floating(table.dtype(), "gather_rows", [&](auto zero) {
    using T = decltype(zero);
    gather_rows_forward(out.data<T>(), table.value().data<T>(), indices.data<int32_t>(), n, dim);
  });
  return record("gather_rows", out, {table}, [=](Node& n_) {
    if (!n_.needs_grad(0)) return;
    record_work(op_work::gather_rows_backward(n, num_rows, dim, s));
    dispatch_floating(n_.out_dtype, "gather_rows", [&](auto zero) {
      using T = decltype(zero);
      scatter_add_rows(n_.input_grad(0).data<T>(), n_.out_grad.data<T>(), indices.data<int32_t>(), n,
                       num_rows, dim);
    });
  });
}

Var scatter_add_rows(const Var& src, const Tensor& indices, int64_t num_rows) {
  const ProfileScope profile("scatter_add_rows", ProfileCategory::forward);
  check_indices_dtype(indices, "scatter_add_rows");
  const int64_t n = indices.numel();
  SHAMN_CHECK(
      src.dim() == indices.dim() + 1 && Shape(src.shape().begin(), src.shape().end() - 1) == indices.shape(),
      "scatter_add_rows: src ", src.value().str(), " does not match indices ", indices.str(),
      " plus a feature dim");
  check_row_indices(indices.data<int32_t>(), n, num_rows, "scatter_add_rows");
  const int64_t dim = src.size(-1);
  const int64_t s = static_cast<int64_t>(dtype_size(src.dtype()));
  record_work(op_work::gather_rows_backward(n, num_rows, dim, s));  // the same scatter-add
  Tensor out = Tensor::zeros({num_rows, dim}, src.dtype());
  dispatch_floating(src.dtype(), "scatter_add_rows", [&](auto zero) {
    using T = decltype(zero);
    scatter_add_rows(out.data<T>(), src.value().data<T>(), indices.data<int32_t>(), n, num_rows, dim);
  });
  return record("scatter_add_rows", out, {src}, [=](Node& n_) {
    if (!n_.needs_grad(0)) return;
    record_work(op_work::gather_rows_forward(n, num_rows, dim, s));  // the same gather
    dispatch_floating(n_.out_dtype, "scatter_add_rows", [&](auto zero) {
      using T = decltype(zero);
      // d src[i] += d out[idx[i]]
      Tensor rows_grad = Tensor::empty({n, dim}, n_.out_dtype);
      gather_rows_forward(rows_grad.data<T>(), n_.out_grad.data<T>(), indices.data<int32_t>(), n, dim);
      axpy(n_.input_grad(0).data<T>(), rows_grad.data<T>(), T(1), n * dim);
    });
  });
}

}  // namespace shamn
