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

TEST_CASE("block_sparse_linear rejects a bad pattern", "[autograd][block_sparse]") {
  const Var x(random_tensor({2, 48}, 29, DType::f32));
  const Var w(random_tensor({2, 2, 16, 16}, 30, DType::f32));
  const Tensor unsorted = Tensor::from_data<int32_t>({2, 2}, {2, 0, 1, 2});
  CHECK_THROWS_WITH(block_sparse_linear(x, w, unsorted, Var(), 16), Catch::Contains("sorted"));
  const Tensor out_of_range = Tensor::from_data<int32_t>({2, 2}, {0, 3, 1, 2});
  CHECK_THROWS_WITH(block_sparse_linear(x, w, out_of_range, Var(), 16), Catch::Contains("outside"));
}
