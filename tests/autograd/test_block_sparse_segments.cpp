// block_sparse_linear_segments: bitwise equal to one block_sparse_linear per row
// segment (values and gradients, empty segments included), reading its rows
// through an index bitwise equal to gather_rows before it, gradient checks, and
// thread-count independence.
#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"
#include "core/product_precision.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::random_tensor;

namespace {

// 3 column blocks, 2 block rows, 2 active blocks per row; three patterns.
std::vector<Tensor> patterns() {
  return {Tensor::from_data<int32_t>({2, 2}, {0, 2, 1, 2}), Tensor::from_data<int32_t>({2, 2}, {0, 1, 0, 2}),
          Tensor::from_data<int32_t>({2, 2}, {1, 2, 0, 1})};
}

struct Grads {
  std::vector<Tensor> y;  // per non-empty segment
  Tensor dx;
  std::vector<Tensor> dw, db;
};

Tensor segment_indices(int64_t begin, int64_t end) {
  Tensor t = Tensor::empty({end - begin}, DType::i32);
  for (int64_t i = begin; i < end; ++i) t.data<int32_t>()[i - begin] = static_cast<int32_t>(i);
  return t;
}

// How run() applies the layers: segmented, one block_sparse_linear per
// segment, segmented reading gelu(x) (fused in the op, or a gelu op before it),
// or segmented over rows of a 7-row table picked by an index (read through the
// op's rows, or gathered by gather_rows first), each table row read twice or
// not at all, as the MoE's tokens are.
enum class Mode { segmented, separate, gelu_fused, gelu_op, rows_in_op, gather_op };

Tensor table_rows() { return Tensor::from_data<int32_t>({12}, {3, 0, 5, 1, 6, 2, 0, 5, 3, 1, 6, 2}); }

// Three layers over rows [0, 5), [5, 5) (none) and [5, 12) of x.
Grads run(Mode mode, int threads) {
  set_num_threads(threads);
  const int64_t b = 16;
  const std::vector<int64_t> offsets{0, 5, 5, 12};
  const auto ci = patterns();
  const bool table = mode == Mode::rows_in_op || mode == Mode::gather_op;
  Var x(random_tensor({table ? 7 : 12, 3 * b}, 40, DType::f32), true);
  std::vector<BlockSparseOperands> layers;
  for (int g = 0; g < 3; ++g)
    layers.push_back({Var(random_tensor({2, 2, b, b}, 41 + g, DType::f32), true), ci[g],
                      Var(random_tensor({2 * b}, 44 + g, DType::f32), true)});
  const Tensor seed = random_tensor({12, 2 * b}, 47, DType::f32);
  Grads r;
  if (mode != Mode::separate) {
    Var y = mode == Mode::gelu_fused
                ? block_sparse_linear_segments(x, offsets, layers, b, InputActivation::gelu)
            : mode == Mode::gelu_op ? block_sparse_linear_segments(gelu(x), offsets, layers, b)
            : mode == Mode::rows_in_op
                ? block_sparse_linear_segments(x, offsets, layers, b, InputActivation::none, table_rows())
            : mode == Mode::gather_op
                ? block_sparse_linear_segments(gather_rows(x, table_rows()), offsets, layers, b)
                : block_sparse_linear_segments(x, offsets, layers, b);
    sum(mul(y, Var(seed))).backward();
    for (int g = 0; g < 3; ++g)
      if (offsets[g + 1] > offsets[g]) r.y.push_back(y.value().slice(offsets[g], offsets[g + 1]));
  } else {
    Var loss;
    for (int g = 0; g < 3; ++g) {
      if (offsets[g + 1] == offsets[g]) continue;
      Var y = block_sparse_linear(gather_rows(x, segment_indices(offsets[g], offsets[g + 1])),
                                  layers[g].values, ci[g], layers[g].bias, b);
      Var part = sum(mul(y, Var(seed.slice(offsets[g], offsets[g + 1]))));
      loss = loss.defined() ? add(loss, part) : part;
      r.y.push_back(y.value());
    }
    loss.backward();
  }
  r.dx = x.grad();
  for (const auto& l : layers) {
    r.dw.push_back(l.values.grad());
    r.db.push_back(l.bias.grad());
  }
  return r;
}

void check_same(const Grads& a, const Grads& b) {
  REQUIRE(a.y.size() == b.y.size());
  for (size_t s = 0; s < a.y.size(); ++s) CHECK(bitwise_equal(a.y[s], b.y[s]));
  CHECK(bitwise_equal(a.dx, b.dx));
  for (size_t g = 0; g < a.dw.size(); ++g) {
    INFO("layer " << g);
    REQUIRE(a.dw[g].defined() == b.dw[g].defined());
    if (!a.dw[g].defined()) continue;
    CHECK(bitwise_equal(a.dw[g], b.dw[g]));
    CHECK(bitwise_equal(a.db[g], b.db[g]));
  }
}

}  // namespace

TEST_CASE("block_sparse_linear_segments equals one block_sparse_linear per segment",
          "[autograd][block_sparse][segments]") {
  test::ThreadCountGuard guard;
  const Grads segmented = run(Mode::segmented, 2), separate = run(Mode::separate, 2);
  check_same(segmented, separate);
  CHECK_FALSE(segmented.dw[1].defined());  // the empty segment's layer got no gradient
}

TEST_CASE("block_sparse_linear_segments is bit-identical with 1 and 2 threads",
          "[autograd][block_sparse][segments][determinism]") {
  test::ThreadCountGuard guard;
  check_same(run(Mode::segmented, 1), run(Mode::segmented, 2));
  check_same(run(Mode::gelu_fused, 1), run(Mode::gelu_fused, 2));
}

TEST_CASE("block_sparse_linear_segments reading gelu(x) equals a gelu op before it, bitwise",
          "[autograd][block_sparse][segments]") {
  test::ThreadCountGuard guard;
  const Grads fused = run(Mode::gelu_fused, 2);
  check_same(fused, run(Mode::gelu_op, 2));
  CHECK_FALSE(bitwise_equal(fused.dx, run(Mode::segmented, 2).dx));  // gelu is applied
}

TEST_CASE("block_sparse_linear_segments reading rows through an index equals gather_rows before it, bitwise",
          "[autograd][block_sparse][segments]") {
  test::ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    const Grads in_op = run(Mode::rows_in_op, threads);
    check_same(in_op, run(Mode::gather_op, threads));
    CHECK(in_op.dx.size(0) == 7);  // the gradient is the table's
  }
}

TEST_CASE("block_sparse_linear_segments under bf16: the same equalities, and not the f32 numbers",
          "[autograd][block_sparse][segments][bf16]") {
  test::ThreadCountGuard guard;
  const Grads f32 = run(Mode::segmented, 2);
  const ScopedProductPrecision bf16(ProductPrecision::bf16);
  const Grads segmented = run(Mode::segmented, 2);
  check_same(segmented, run(Mode::separate, 2));
  check_same(segmented, run(Mode::segmented, 1));
  check_same(run(Mode::gelu_fused, 2), run(Mode::gelu_op, 2));
  check_same(run(Mode::rows_in_op, 2), run(Mode::gather_op, 2));
  CHECK_FALSE(bitwise_equal(segmented.y[0], f32.y[0]));
  CHECK_FALSE(bitwise_equal(segmented.dx, f32.dx));
}

TEST_CASE("gradcheck: block_sparse_linear_segments reading rows through an index",
          "[autograd][gradcheck][block_sparse][segments]") {
  const int64_t b = 16;
  const auto ci = patterns();
  const Tensor rows = Tensor::from_data<int32_t>({5}, {2, 0, 2, 3, 0});
  check_gradients(
      [=](const std::vector<Var>& v) {
        return block_sparse_linear_segments(v[0], {0, 2, 2, 5},
                                            {{v[1], ci[0], v[2]}, {v[3], ci[1], Var()}, {v[4], ci[2], v[5]}},
                                            b, InputActivation::none, rows);
      },
      {random_tensor({4, 3 * b}, 62), random_tensor({2, 2, b, b}, 63), random_tensor({2 * b}, 64),
       random_tensor({2, 2, b, b}, 65), random_tensor({2, 2, b, b}, 66), random_tensor({2 * b}, 67)});
}

TEST_CASE("gradcheck: block_sparse_linear_segments", "[autograd][gradcheck][block_sparse][segments]") {
  const int64_t b = 16;
  const auto ci = patterns();
  check_gradients(
      [=](const std::vector<Var>& v) {
        return block_sparse_linear_segments(
            v[0], {0, 2, 2, 5}, {{v[1], ci[0], v[2]}, {v[3], ci[1], Var()}, {v[4], ci[2], v[5]}}, b);
      },
      {random_tensor({5, 3 * b}, 50), random_tensor({2, 2, b, b}, 51), random_tensor({2 * b}, 52),
       random_tensor({2, 2, b, b}, 53), random_tensor({2, 2, b, b}, 54), random_tensor({2 * b}, 55)});
}

TEST_CASE("gradcheck: block_sparse_linear_segments reading gelu(x)",
          "[autograd][gradcheck][block_sparse][segments]") {
  const int64_t b = 16;
  const auto ci = patterns();
  check_gradients(
      [=](const std::vector<Var>& v) {
        return block_sparse_linear_segments(v[0], {0, 2, 2, 5},
                                            {{v[1], ci[0], v[2]}, {v[3], ci[1], Var()}, {v[4], ci[2], v[5]}},
                                            b, InputActivation::gelu);
      },
      {random_tensor({5, 3 * b}, 56), random_tensor({2, 2, b, b}, 57), random_tensor({2 * b}, 58),
       random_tensor({2, 2, b, b}, 59), random_tensor({2, 2, b, b}, 60), random_tensor({2 * b}, 61)});
}

TEST_CASE("block_sparse_linear_segments rejects offsets that do not cover x",
          "[autograd][block_sparse][segments]") {
  const Var x(random_tensor({4, 48}, 56, DType::f32));
  const std::vector<BlockSparseOperands> layers{
      {Var(random_tensor({2, 2, 16, 16}, 57, DType::f32)), patterns()[0], Var()}};
  CHECK_THROWS_WITH(block_sparse_linear_segments(x, {0, 3}, layers, 16), Catch::Contains("4 rows"));
  CHECK_THROWS_WITH(block_sparse_linear_segments(x, {0, 2, 4}, layers, 16),
                    Catch::Contains("offsets for 1 layers"));
  // Through an index: it must count the rows, and every entry must be a row of x.
  const Tensor rows = Tensor::from_data<int32_t>({3}, {0, 4, 1});
  CHECK_THROWS_WITH(block_sparse_linear_segments(x, {0, 3}, layers, 16, InputActivation::none, rows),
                    Catch::Contains("index 4 at position 1"));
  CHECK_THROWS_WITH(block_sparse_linear_segments(x, {0, 4}, layers, 16, InputActivation::none,
                                                 Tensor::from_data<int32_t>({3}, {0, 1, 2})),
                    Catch::Contains("3 rows"));
}

TEST_CASE("block_sparse_linear_segments rejects layers that share a parameter",
          "[autograd][block_sparse][segments]") {
  // The segments run concurrently, each writing its own layer's gradients.
  const Var x(random_tensor({4, 48}, 62, DType::f32));
  const Var w(random_tensor({2, 2, 16, 16}, 63, DType::f32), true);
  const Var w2(random_tensor({2, 2, 16, 16}, 64, DType::f32), true);
  const Var bias(random_tensor({32}, 65, DType::f32), true);
  const std::vector<int64_t> offsets{0, 2, 4};
  CHECK_THROWS_WITH(
      block_sparse_linear_segments(x, offsets, {{w, patterns()[0], Var()}, {w, patterns()[1], Var()}}, 16),
      Catch::Contains("layers 0 and 1 share a parameter"));
  CHECK_THROWS_WITH(
      block_sparse_linear_segments(x, offsets, {{w, patterns()[0], bias}, {w2, patterns()[1], bias}}, 16),
      Catch::Contains("layers 0 and 1 share a parameter"));
  // Distinct parameters throughout are accepted.
  const Var b2(random_tensor({32}, 66, DType::f32), true);
  CHECK_NOTHROW(
      block_sparse_linear_segments(x, offsets, {{w, patterns()[0], bias}, {w2, patterns()[1], b2}}, 16));
}
