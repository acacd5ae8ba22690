// train.precision = "bf16": a product under bf16 rounds its operands to bf16,
// in the forward and in every gradient (the seed of the backward is rounded in
// the test, so its rounding in the op is a no-op). A matmul then equals the f32
// product of the rounded operands; the block-sparse products add their terms in
// pairs, as do the packed matmuls (tests/core/test_bf16_products.cpp checks
// that arithmetic).
#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"
#include "autograd/ops_hash_embedding.h"
#include "core/bf16.h"
#include "core/kernel_level.h"
#include "core/product_precision.h"
#include "helpers.h"

using namespace shamn;
using test::random_tensor;

namespace {

Tensor rounded(const Tensor& t) {
  Tensor r = t.clone();
  round_to_bf16(r.data<float>(), r.data<float>(), r.numel());
  return r;
}

struct Result {
  Tensor y;
  std::vector<Tensor> grads;
};

// f(inputs) and the gradients of sum(f * seed) with respect to every input.
Result run(const std::function<Var(const std::vector<Var>&)>& f, const std::vector<Tensor>& inputs,
           const Tensor& seed) {
  std::vector<Var> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t.clone(), true);
  Var y = f(vars);
  sum(mul(y, Var(seed))).backward();
  Result r{y.value(), {}};
  for (const Var& v : vars) r.grads.push_back(v.grad());
  return r;
}

bool same(const Result& a, const Result& b) {
  if (!bitwise_equal(a.y, b.y)) return false;
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (!bitwise_equal(a.grads[i], b.grads[i])) return false;
  return true;
}

// bf16 on raw inputs != f32 on raw inputs, and == f32 on rounded inputs (a
// product that sums in k order), or, for one that sums in pairs (`pairs`:
// the packed kernels), == bf16 on rounded inputs: the op rounds every operand.
void check_bf16_product(const std::function<Var(const std::vector<Var>&)>& f, const std::vector<Tensor>& raw,
                        const Shape& out_shape, bool pairs, std::vector<bool> round = {}) {
  round.resize(raw.size(), true);
  const Tensor seed = rounded(random_tensor(out_shape, 90, DType::f32));
  std::vector<Tensor> pre_rounded;
  for (size_t i = 0; i < raw.size(); ++i) pre_rounded.push_back(round[i] ? rounded(raw[i]) : raw[i]);
  Result bf16;
  {
    const ScopedProductPrecision scope(ProductPrecision::bf16);
    bf16 = run(f, raw, seed);
  }
  {
    const ScopedProductPrecision oracle(pairs ? ProductPrecision::bf16 : ProductPrecision::f32);
    CHECK(same(bf16, run(f, pre_rounded, seed)));
  }
  CHECK_FALSE(bitwise_equal(bf16.y, run(f, raw, seed).y));
}

}  // namespace

TEST_CASE("bf16 matmul: rounds its operands, all transposes and kernel levels", "[autograd][bf16]") {
  test::ThreadCountGuard guard;
  const int64_t M = 37, N = 45, K = 29;  // more rows than the unpacked path takes
  for (int level = 0; level < kKernelLevels; ++level) {
    if (!kernel_level_supported(static_cast<KernelLevel>(level))) continue;
    const ScopedKernelLevel scoped(static_cast<KernelLevel>(level));
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          INFO("level " << kernel_level_name(static_cast<KernelLevel>(level)) << " threads " << threads
                        << " trans_a " << ta << " trans_b " << tb);
          const Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, 81, DType::f32);
          const Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 82, DType::f32);
          check_bf16_product([=](const std::vector<Var>& v) { return matmul(v[0], v[1], ta, tb); }, {a, b},
                             {M, N}, true);
        }
    }
  }
  // A product of one row (the unpacked path, the f32 product of rounded copies).
  check_bf16_product([](const std::vector<Var>& v) { return matmul(v[0], v[1], false, true); },
                     {random_tensor({1, 33}, 83, DType::f32), random_tensor({20, 33}, 84, DType::f32)},
                     {1, 20}, false);
}

TEST_CASE("bf16 block_sparse_linear: rounds its operands, not the bias, at every kernel level",
          "[autograd][bf16][block_sparse]") {
  test::ThreadCountGuard guard;
  const Tensor ci = Tensor::from_data<int32_t>({2, 2}, {0, 2, 1, 2});
  // 16 and 32: the fast kernels' two tile shapes (sums in pairs of k); 3: the
  // naive loops on rounded copies.
  for (int64_t b : {16, 32, 3}) {
    const Tensor x = random_tensor({9, 3 * b}, 85, DType::f32);
    const Tensor w = random_tensor({2, 2, b, b}, 86, DType::f32);
    const Tensor bias = random_tensor({2 * b}, 87, DType::f32);
    const auto f = [=](const std::vector<Var>& v) { return block_sparse_linear(v[0], v[1], ci, v[2], b); };
    for (int level = 0; level < kKernelLevels; ++level) {
      if (!kernel_level_supported(static_cast<KernelLevel>(level))) continue;
      const ScopedKernelLevel scoped(static_cast<KernelLevel>(level));
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        INFO("block " << b << " level " << kernel_level_name(static_cast<KernelLevel>(level)) << " threads "
                      << threads);
        // The bias is added, not multiplied: it is not rounded.
        check_bf16_product(f, {x, w, bias}, {9, 2 * b}, b != 3, {true, true, false});
      }
    }
  }
}

TEST_CASE("bf16 hashed head: its three products round z and the table, not the importance weights",
          "[autograd][bf16][hash][head]") {
  test::ThreadCountGuard guard;
  // 37 rows: two whole 16-row chunks of the fused loss and a short one, more
  // rows than the GEMM's unpacked path takes.
  const int64_t n = 37, vocab = 90, buckets = 24, dim = 40, hashes = 2;
  const Tensor z = random_tensor({n, dim}, 91, DType::f32);
  const Tensor table = random_tensor({buckets, dim}, 92, DType::f32, -0.5, 0.5);
  const Tensor importance = random_tensor({vocab, hashes}, 93, DType::f32, 0.2, 1.5);
  const Tensor bucket_index = hash_bucket_index(vocab, hashes, buckets);
  const Tensor targets = test::random_indices({n}, static_cast<int32_t>(vocab), 94);
  const auto logits = [=](const std::vector<Var>& v) { return hash_head(v[0], v[1], v[2], bucket_index); };
  const auto loss = [=](const std::vector<Var>& v) {
    return hash_head_cross_entropy(v[0], v[1], v[2], bucket_index, targets);
  };
  for (int level = 0; level < kKernelLevels; ++level) {
    if (!kernel_level_supported(static_cast<KernelLevel>(level))) continue;
    const ScopedKernelLevel scoped(static_cast<KernelLevel>(level));
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO("level " << kernel_level_name(static_cast<KernelLevel>(level)) << " threads " << threads);
      check_bf16_product(logits, {z, table, importance}, {n, vocab}, true, {true, true, false});
      check_bf16_product(loss, {z, table, importance}, {}, true, {true, true, false});
    }
  }
  // The importance weights are not rounded: rounding them first changes the result.
  const ScopedProductPrecision scope(ProductPrecision::bf16);
  const Tensor seed = rounded(random_tensor({}, 95, DType::f32));
  CHECK_FALSE(
      same(run(loss, {z, table, importance}, seed), run(loss, {z, table, rounded(importance)}, seed)));
}
