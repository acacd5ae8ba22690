// The tape: when nodes are recorded, how gradients accumulate, graph lifetime.
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/aligned.h"
#include "helpers.h"

using namespace shamn;
using test::random_tensor;

TEST_CASE("ops record a node only when grad mode is on and an input needs a gradient", "[autograd][engine]") {
  Var w(random_tensor({3, 3}, 1, DType::f32), true);
  Var x(random_tensor({2, 3}, 2, DType::f32), false);
  CHECK(matmul(x, w).grad_fn() != nullptr);
  CHECK(matmul(x, x, false, true).grad_fn() == nullptr);
  CHECK_FALSE(matmul(x, x, false, true).requires_grad());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(grad_enabled());
    Var y = matmul(x, w);
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    { NoGradGuard nested; }
    CHECK_FALSE(grad_enabled());
  }
  CHECK(grad_enabled());
}

TEST_CASE("backward accumulates into leaves across calls and zero_grad resets", "[autograd][engine]") {
  Var x(Tensor::from_data<float>({3}, {1, 2, 3}), true);
  sum(mul(x, x)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  sum(x).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 5, 7});
  x.zero_grad();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("zero_grad fills lazily: what reads, adds into or writes the gradient next sees zeros",
          "[autograd][engine]") {
  Var x(random_tensor({4, 9}, 21, DType::f32), true);
  const Var gain(Tensor::full({9}, 1.5));
  sum(rms_norm(x, gain)).backward();  // rms_norm writes every element of x's gradient
  const std::vector<float> once = x.grad().to_vector<float>();
  // Garbage in the buffer, then zero_grad: the next full write stores over it.
  x.grad().fill(123.0);
  x.zero_grad();
  CHECK(x.has_grad());
  sum(rms_norm(x, gain)).backward();
  CHECK(x.grad().to_vector<float>() == once);
  // An op that adds into its input's gradient (scale's backward) adds to zeros.
  x.grad().fill(5.0);
  x.zero_grad();
  sum(scale(x, 2.0)).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(36, 2.0f));
  // A plain read sees zeros.
  x.zero_grad();
  CHECK(x.grad().to_vector<float>() == std::vector<float>(36, 0.0f));
}

TEST_CASE("backward frees the graph, a second backward is a clear error", "[autograd][engine]") {
  Var x(Tensor::from_data<float>({2}, {1, 2}), true);
  Var loss = sum(gelu(x));
  std::weak_ptr<Node> root = loss.grad_fn();
  loss.backward();
  CHECK(root.lock()->inputs.empty());
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("already freed"));
}

TEST_CASE("an intermediate no backward reads is freed when its caller drops it, one that is read is kept",
          "[autograd][engine]") {
  // 1 MiB tensors: blocks the allocator counts (core/aligned.h).
  constexpr size_t kMiB = size_t{1} << 20;
  Var x(random_tensor({512, 512}, 3, DType::f32), true);
  const size_t before = live_block_bytes();
  Var residual;
  {
    const Var branch = scale(x, 2.0);  // add's backward does not read it
    residual = add(x, branch);
  }
  CHECK(live_block_bytes() - before == kMiB);  // the sum only
  Var product;
  {
    const Var branch = scale(x, 2.0);  // mul's backward reads it
    product = mul(x, branch);
  }
  CHECK(live_block_bytes() - before == 3 * kMiB);  // and the product with its saved factor
  sum(add(residual, product)).backward();
  // d/dx (x + 2x + x * 2x) = 3 + 4x
  const std::vector<float> xv = x.value().to_vector<float>(), g = x.grad().to_vector<float>();
  for (size_t i = 0; i < xv.size(); i += 4099) CHECK(g[i] == Approx(3.0f + 4.0f * xv[i]));
}

TEST_CASE("errors: non-scalar backward, no gradient, bad requires_grad", "[autograd][engine]") {
  Var x(Tensor::zeros({2}), true);
  CHECK_THROWS_WITH(scale(x, 2).backward(), Catch::Contains("needs a scalar"));
  Var c(Tensor::zeros({1}), false);
  CHECK_THROWS_WITH(sum(c).backward(), Catch::Contains("does not depend"));
  CHECK_THROWS_AS(Var(Tensor::zeros({2}, DType::i32), true), Error);
  CHECK_THROWS_WITH(scale(x, 2).set_requires_grad(false), Catch::Contains("only be set on a leaf"));
  CHECK_THROWS_WITH(matmul(Var(Tensor::zeros({2, 3})), Var(Tensor::zeros({2, 3}))),
                    Catch::Contains("inner dimensions differ"));
  CHECK_THROWS_WITH(add(Var(Tensor::zeros({2, 3})), Var(Tensor::zeros({2}))),
                    Catch::Contains("cannot broadcast"));
  CHECK_THROWS_WITH(gather_rows(Var(Tensor::zeros({4, 2})), Tensor::from_data<int32_t>({2}, {1, 4})),
                    Catch::Contains("index 4 at position 1"));
  CHECK_THROWS_WITH(cross_entropy(Var(Tensor::zeros({2, 3})), Tensor::from_data<int32_t>({2}, {0, 3})),
                    Catch::Contains("target 3 at position 1"));
}

TEST_CASE("a long chain backpropagates and is destroyed without deep recursion", "[autograd][engine]") {
  Var x(Tensor::from_data<float>({1}, {1.0f}), true);
  Var y = x;
  for (int i = 0; i < 200000; ++i) y = scale(y, 1.0);
  y.backward(Tensor::full({1}, 1.0));
  CHECK(x.grad().item() == 1.0);
  Var z = x;
  for (int i = 0; i < 200000; ++i) z = scale(z, 1.0);
  z = Var();  // dropped without backward: must not overflow the stack
  SUCCEED();
}

TEST_CASE("detach cuts the graph, reshape is a view of the value", "[autograd][engine]") {
  Var x(Tensor::from_data<float>({2, 2}, {1, 2, 3, 4}), true);
  Var d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.value().shares_storage_with(x.value()));
  Var r = reshape(x, {4});
  CHECK(r.value().shares_storage_with(x.value()));
  sum(mul(r, Var(Tensor::from_data<float>({4}, {1, 2, 3, 4})))).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("backward with a seed computes a vector-Jacobian product", "[autograd][engine]") {
  Var x(Tensor::from_data<double>({3}, {1, 2, 3}), true);
  Var y = mul(x, x);
  y.backward(Tensor::from_data<double>({3}, {1, 0, -1}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, -6});
}

TEST_CASE("backward hooks report each leaf once, when no node left to run touches it", "[autograd][engine]") {
  // h = x * w1, loss = sum(h * w2 + h * w1): w1 is used by the first node and a late one.
  Var x(Tensor::from_data<float>({2}, {1, 2}), true);
  Var w1(Tensor::from_data<float>({2}, {3, -1}), true);
  Var w2(Tensor::from_data<float>({2}, {0.5f, 4}), true);
  Var unused(Tensor::from_data<float>({1}, {9}), true);
  Var h = mul(x, w1);
  Var loss = sum(add(mul(h, w2), mul(h, w1)));

  std::vector<std::string> order;
  std::vector<std::vector<float>> grad_when_done;
  int nodes = 0;
  BackwardHooks hooks;
  hooks.leaf_done = [&](const Var& leaf) {
    order.push_back(leaf.impl() == x.impl() ? "x" : leaf.impl() == w1.impl() ? "w1" : "w2");
    grad_when_done.push_back(leaf.grad().to_vector<float>());
  };
  hooks.after_node = [&] { ++nodes; };
  loss.backward(hooks);

  CHECK(nodes == 5);  // three muls, add, sum
  // w2 completes at mul(h, w2); w1's last consumer is the first node, h = x * w1,
  // which runs last and completes x and w1 (in its input order). `unused` is not
  // on the graph.
  CHECK(order == std::vector<std::string>{"w2", "x", "w1"});
  // What each leaf held when reported is its final gradient.
  for (size_t i = 0; i < order.size(); ++i) {
    const Var& v = order[i] == "x" ? x : order[i] == "w1" ? w1 : w2;
    CHECK(grad_when_done[i] == v.grad().to_vector<float>());
  }
  CHECK_FALSE(unused.grad().defined());
}

// reshape and add hand their output's gradient to the op that made their input
// when nothing else holds it (Node::pass_grad_to_input). The cases where that
// must not happen, or must happen once: an input used twice by one add, a
// tensor with two consumers, and leaves (whose .grad accumulates across calls).
TEST_CASE("gradients passed through reshape and add are the sums they replace", "[autograd][engine]") {
  const Tensor xs = random_tensor({4, 3}, 7, DType::f32);
  const Tensor cs = random_tensor({12}, 8, DType::f32);
  const Tensor ks = random_tensor({4, 3}, 9, DType::f32);
  const std::vector<float> x0 = xs.to_vector<float>(), c = cs.to_vector<float>(), k = ks.to_vector<float>();
  Var x(xs, true), cv(cs, false), kv(ks, false);
  for (int call = 1; call <= 2; ++call) {
    Var u = scale(x, 2.0);     // an op's output: may take a passed gradient
    Var v = reshape(u, {12});  // passes dL/dv on to u's op
    Var w = add(v, v);         // one op, the same input twice
    Var z = sum(mul(u, kv));   // u's second consumer, recorded after w
    Var loss = add(sum(mul(w, cv)), z);
    loss.backward();
    const std::vector<float> g = x.grad().to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      const float du = (c[i] + c[i]) + k[i];  // both consumers of u; + commutes exactly
      CHECK(g[i] == static_cast<float>(call) * (2.0f * du));
    }
  }
  CHECK(x.value().to_vector<float>() == x0);
}

TEST_CASE("a tensor is its storage's sole owner only when no other handle or view shares it",
          "[core][tensor]") {
  Tensor t = Tensor::zeros({4, 2}, DType::f32);
  CHECK(t.sole_owner());
  {
    const Tensor view = t.reshape({8});
    CHECK_FALSE(t.sole_owner());
    CHECK_FALSE(view.sole_owner());
  }
  CHECK(t.sole_owner());
  CHECK_FALSE(t.slice(0, 2).sole_owner());
  CHECK_FALSE(Tensor().sole_owner());
}
