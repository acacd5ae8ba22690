// Finite-difference gradient checks of block_sparse_linear, in double (naive kernels)
// and in float (the fast kernels: the block is a multiple of 16).
#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::random_tensor;

namespace {

// 3 column blocks, 2 block rows, 2 active blocks per row.
Tensor pattern() { return Tensor::from_data<int32_t>({2, 2}, {0, 2, 1, 2}); }

}  // namespace

TEST_CASE("gradcheck: block_sparse_linear with bias", "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 16;
  const Tensor ci = pattern();
  check_gradients(
      [=](const std::vector<Var>& v) { return block_sparse_linear(v[0], v[1], ci, v[2], b); },
      {random_tensor({2, 3, 3 * b}, 21), random_tensor({2, 2, b, b}, 22), random_tensor({2 * b}, 23)});
}

TEST_CASE("gradcheck: block_sparse_linear without bias", "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 16;
  const Tensor ci = pattern();
  check_gradients([=](const std::vector<Var>& v) { return block_sparse_linear(v[0], v[1], ci, Var(), b); },
                  {random_tensor({5, 3 * b}, 24), random_tensor({2, 2, b, b}, 25)});
}

TEST_CASE("gradcheck: block_sparse_linear on a small generic block", "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 3;
  const Tensor ci = pattern();
  check_gradients(
      [=](const std::vector<Var>& v) { return block_sparse_linear(v[0], v[1], ci, v[2], b); },
      {random_tensor({4, 3 * b}, 26), random_tensor({2, 2, b, b}, 27), random_tensor({2 * b}, 28)});
}

TEST_CASE("gradcheck: block_sparse_linear reading gelu(x) and silu(x)",
          "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 16;
  const Tensor ci = pattern();
  for (InputActivation act : {InputActivation::gelu, InputActivation::silu})
    check_gradients(
        [=](const std::vector<Var>& v) { return block_sparse_linear(v[0], v[1], ci, v[2], b, act); },
        {random_tensor({2, 3, 3 * b}, 29), random_tensor({2, 2, b, b}, 30), random_tensor({2 * b}, 31)});
}

TEST_CASE("block_sparse_linear reading act(x) equals the activation op before it, bitwise",
          "[autograd][block_sparse]") {
  // 5 rows: the backward computes act(x) beside act'(x) for the values' gradient;
  // 87,388 rows (4.2M inputs): the values' kernels apply act again. x's gradient
  // is written (x read once) or added to (x read again after).
  const int64_t b = 16;
  const Tensor ci = pattern();
  for (InputActivation act : {InputActivation::gelu, InputActivation::silu})
    for (int64_t n : {5, 87388})
      for (bool read_again : {false, true}) {
        INFO((act == InputActivation::gelu ? "gelu" : "silu")
             << " rows " << n << " x read again " << read_again);
        // The same leaves and upstream gradient through the fused op and through the two ops.
        std::vector<Tensor> grads[2];
        Tensor outs[2];
        for (int fused = 0; fused < 2; ++fused) {
          Var x(random_tensor({n, 3 * b}, 32, DType::f32), true),
              w(random_tensor({2, 2, b, b}, 33, DType::f32), true),
              bias(random_tensor({2 * b}, 34, DType::f32), true);
          const Var y =
              fused ? block_sparse_linear(x, w, ci, bias, b, act)
                    : block_sparse_linear(act == InputActivation::gelu ? gelu(x) : silu(x), w, ci, bias, b);
          Var loss = sum(mul(y, Var(random_tensor({n, 2 * b}, 35, DType::f32))));
          // Recorded after y, so its backward reaches x first.
          if (read_again) loss = add(loss, sum(mul(x, Var(random_tensor({n, 3 * b}, 36, DType::f32)))));
          loss.backward();
          outs[fused] = y.value();
          grads[fused] = {x.grad(), w.grad(), bias.grad()};
        }
        CHECK(bitwise_equal(outs[0], outs[1]));
        for (size_t i = 0; i < 3; ++i) {
          INFO("gradient " << i);
          CHECK(bitwise_equal(grads[0][i], grads[1][i]));
        }
      }
}

// The residual's gradient is handed to its producer where it can take it (an
// op's output), else added (a leaf; an op output whose gradient is in use).
TEST_CASE("gradcheck: block_sparse_linear with a residual, handed over and added",
          "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 16;
  const Tensor ci = pattern();
  const std::vector<Tensor> inputs{random_tensor({2, 3, 3 * b}, 36), random_tensor({2, 2, b, b}, 37),
                                   random_tensor({2 * b}, 38), random_tensor({2, 3, 2 * b}, 39)};
  check_gradients(
      [=](const std::vector<Var>& v) {
        return block_sparse_linear(v[0], v[1], ci, v[2], b, InputActivation::silu, v[3]);
      },
      inputs);
  check_gradients(
      [=](const std::vector<Var>& v) {
        return block_sparse_linear(v[0], v[1], ci, Var(), b, InputActivation::none, scale(v[2], 2.0));
      },
      {inputs[0], inputs[1], inputs[3]});
  check_gradients(
      [=](const std::vector<Var>& v) {
        Var r = scale(v[3], 2.0);
        return mul(block_sparse_linear(v[0], v[1], ci, v[2], b, InputActivation::none, r), r);
      },
      inputs);
}

// The residual is the op's input x, made by one op: its gradient must not be
// handed over while the op still reads dy to write dx.
TEST_CASE("gradcheck: block_sparse_linear whose residual is its input",
          "[autograd][gradcheck][block_sparse]") {
  const int64_t b = 16;
  const Tensor square = Tensor::from_data<int32_t>({2, 1}, {1, 0});
  check_gradients(
      [=](const std::vector<Var>& v) {
        const Var x = scale(v[0], 2.0);
        return block_sparse_linear(x, v[1], square, v[2], b, InputActivation::none, x);
      },
      {random_tensor({3, 2 * b}, 47), random_tensor({2, 1, b, b}, 48), random_tensor({2 * b}, 49)});
}

TEST_CASE("block_sparse_linear with a residual equals add after it, bitwise", "[autograd][block_sparse]") {
  const int64_t b = 16;
  const Tensor ci = pattern();
  for (bool residual_is_op : {false, true}) {
    INFO("residual " << (residual_is_op ? "an op's output" : "a leaf"));
    std::vector<Tensor> grads[2];
    Tensor outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      Var x(random_tensor({5, 3 * b}, 40, DType::f32), true),
          w(random_tensor({2, 2, b, b}, 41, DType::f32), true),
          bias(random_tensor({2 * b}, 42, DType::f32), true),
          leaf(random_tensor({5, 2 * b}, 43, DType::f32), true);
      const Var r = residual_is_op ? scale(leaf, 3.0) : leaf;
      const Var y = fused ? block_sparse_linear(x, w, ci, bias, b, InputActivation::silu, r)
                          : add(r, block_sparse_linear(x, w, ci, bias, b, InputActivation::silu));
      sum(mul(y, Var(random_tensor({5, 2 * b}, 44, DType::f32)))).backward();
      outs[fused] = y.value();
      grads[fused] = {x.grad(), w.grad(), bias.grad(), leaf.grad()};
    }
    CHECK(bitwise_equal(outs[0], outs[1]));
    for (size_t i = 0; i < 4; ++i) CHECK(bitwise_equal(grads[0][i], grads[1][i]));
  }
}

TEST_CASE("block_sparse_linear refuses a residual of another shape", "[autograd][block_sparse]") {
  const Var x(random_tensor({2, 48}, 45, DType::f32));
  const Var w(random_tensor({2, 2, 16, 16}, 46, DType::f32));
  const Var r(random_tensor({2, 48}, 47, DType::f32));
  CHECK_THROWS_WITH(block_sparse_linear(x, w, pattern(), Var(), 16, InputActivation::none, r),
                    Catch::Contains("residual"));
}

TEST_CASE("block_sparse_linear rejects a bad pattern", "[autograd][block_sparse]") {
  const Var x(random_tensor({2, 48}, 29, DType::f32));
  const Var w(random_tensor({2, 2, 16, 16}, 30, DType::f32));
  const Tensor unsorted = Tensor::from_data<int32_t>({2, 2}, {2, 0, 1, 2});
  CHECK_THROWS_WITH(block_sparse_linear(x, w, unsorted, Var(), 16), Catch::Contains("sorted"));
  const Tensor out_of_range = Tensor::from_data<int32_t>({2, 2}, {0, 3, 1, 2});
  CHECK_THROWS_WITH(block_sparse_linear(x, w, out_of_range, Var(), 16), Catch::Contains("outside"));
}
