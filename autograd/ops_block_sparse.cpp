#include "autograd/ops_block_sparse.h"

#include "autograd/dispatch.h"

namespace shamn {

Var block_sparse_linear(const Var& x, const Var& values, const Tensor& col_index,
                        const Var& bias, int64_t block) {
  SHAMN_CHECK(values.dim() == 4 && values.size(2) == block && values.size(3) == block,
              "block_sparse_linear: values ", values.value().str(), " are not [nob, a, ", block,
              ", ", block, "]");
  SHAMN_CHECK(col_index.dtype() == DType::i32 && col_index.dim() == 2 &&
                  col_index.size(0) == values.size(0) && col_index.size(1) == values.size(1),
              "block_sparse_linear: col_index ", col_index.str(), " does not match values ",
              values.value().str());
  BlockSparseDims dims;
  dims.block = block;
  dims.in = x.size(-1);
  dims.out = values.size(0) * block;
  dims.active = values.size(1);
  SHAMN_CHECK(dims.in % block == 0, "block_sparse_linear: input width ", dims.in,
              " is not a multiple of the block ", block);
  // The kernels index x and dx through col_index: a bad pattern must stop here.
  check_block_pattern(col_index.data<int32_t>(), dims);
  SHAMN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == dims.out),
              "block_sparse_linear: bias ", bias.defined() ? bias.value().str() : "",
              " does not match ", dims.out, " outputs");
  SHAMN_CHECK(x.dtype() == values.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
              "block_sparse_linear: operand dtypes differ");
  const int64_t n = x.numel() / dims.in;
  Shape out_shape = x.shape();
  out_shape.back() = dims.out;
  Tensor y = Tensor::empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), "block_sparse_linear", [&](auto zero) {
    using T = decltype(zero);
    const T* pb = bias.defined() ? bias.value().data<T>() : nullptr;
    if constexpr (std::is_same_v<T, float>)
      block_sparse_forward(y.data<T>(), x.value().data<T>(), values.value().data<T>(),
                           col_index.data<int32_t>(), pb, n, dims);
    else
      block_sparse_forward_naive(y.data<T>(), x.value().data<T>(), values.value().data<T>(),
                                 col_index.data<int32_t>(), pb, n, dims);
  });

  std::vector<Var> inputs{x, values};
  if (bias.defined()) inputs.push_back(bias);
  const Tensor xv = x.value(), wv = values.value();
  return record("block_sparse_linear", y, inputs, [=](Node& node) {
    dispatch_floating(node.out_dtype, "block_sparse_linear", [&](auto zero) {
      using T = decltype(zero);
      const T* dy = node.out_grad.data<T>();
      const int32_t* ci = col_index.data<int32_t>();
      constexpr bool kFast = std::is_same_v<T, float>;
      if (node.needs_grad(0)) {
        T* dx = node.input_grad(0).data<T>();
        if constexpr (kFast) block_sparse_backward_input(dx, dy, wv.data<T>(), ci, n, dims);
        else block_sparse_backward_input_naive(dx, dy, wv.data<T>(), ci, n, dims);
      }
      if (node.needs_grad(1)) {
        T* dw = node.input_grad(1).data<T>();
        if constexpr (kFast) block_sparse_backward_values(dw, dy, xv.data<T>(), ci, n, dims);
        else block_sparse_backward_values_naive(dw, dy, xv.data<T>(), ci, n, dims);
      }
      if (node.inputs.size() > 2 && node.needs_grad(2)) {
        T* db = node.input_grad(2).data<T>();
        if constexpr (kFast) block_sparse_backward_bias(db, dy, n, dims);
        else block_sparse_backward_bias_naive(db, dy, n, dims);
      }
    });
  });
}

}  // namespace shamn
