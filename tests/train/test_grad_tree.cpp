// GradientTree: micro-batch gradients summed as a balanced tree in micro-batch
// order, so that a rank's block of micro-batches is a subtree (train/grad_tree.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "train/grad_tree.h"

using namespace shamn;

namespace {

// Micro-batch m adds values[m] to every element of `a`'s gradient and, for even m
// only, to `b`'s; `c` never gets a gradient.
struct Params {
  Var a{Tensor::zeros({3}), true};
  Var b{Tensor::zeros({2}), true};
  Var c{Tensor::zeros({2}), true};
  std::vector<NamedVar> named() const { return {{"a", a}, {"b", b}, {"c", c}}; }
};

void add_to_grad(Var& v, float x) {
  if (!v.grad().defined()) v.set_grad(Tensor::zeros(v.shape()));
  float* g = v.grad().data<float>();
  for (int64_t i = 0; i < v.grad().numel(); ++i) g[i] += x;
}

// Values whose float sum depends on the order of additions.
const std::vector<float> kValues = {1e8f, 1.0f, -1e8f, 1.0f, 3.0f, 1e-3f, 7.0f, -2.5f};

}  // namespace

TEST_CASE("GradientTree sums micro-batches as a balanced tree in micro-batch order", "[train][grad_tree]") {
  Params p;
  GradientTree tree(p.named());
  std::vector<int64_t> order;
  auto micro = [&](int64_t m, bool) {
    order.push_back(m);
    add_to_grad(p.a, kValues[static_cast<size_t>(m)]);
    if (m % 2 == 0) add_to_grad(p.b, kValues[static_cast<size_t>(m)]);
  };
  const std::vector<float>& v = kValues;

  tree.run(0, 4, micro);
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3});
  // (1e8 + 1) + (-1e8 + 1) = 1e8 + -1e8 = 0 in float; left to right gives 1.
  const float tree4 = (v[0] + v[1]) + (v[2] + v[3]);
  CHECK(tree4 != ((v[0] + v[1]) + v[2]) + v[3]);
  CHECK(p.a.grad().data<float>()[0] == tree4);
  CHECK(p.a.grad().data<float>()[2] == tree4);
  CHECK(p.b.grad().data<float>()[0] == v[0] + v[2]);
  CHECK_FALSE(p.c.grad().defined());  // no gradient stays none: AdamW leaves c alone

  // Uneven counts split at lo + (hi - lo) / 2: [0, 7) = [0, 3) + [3, 7).
  order.clear();
  tree.run(0, 7, micro);
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  const float tree7 = (v[0] + (v[1] + v[2])) + ((v[3] + v[4]) + (v[5] + v[6]));
  CHECK(p.a.grad().data<float>()[1] == tree7);

  // A subtree on its own (one rank's block of two of four ranks) gives the same
  // partial sum the whole tree forms for it.
  tree.run(4, 8, micro);
  CHECK(p.a.grad().data<float>()[0] == (v[4] + v[5]) + (v[6] + v[7]));

  // One micro-batch: its gradient exactly, as before the tree existed.
  tree.run(5, 6, micro);
  CHECK(p.a.grad().data<float>()[0] == v[5]);
  CHECK(p.b.grad().data<float>()[0] == 0.0f);  // defined since the first run, zeroed
}

TEST_CASE("GradientTree rejects an empty range", "[train][grad_tree]") {
  Params p;
  GradientTree tree(p.named());
  CHECK_THROWS(tree.run(2, 2, [](int64_t, bool) {}));
}

TEST_CASE("GradientTree::finalize completes a gradient during the last micro-batch", "[train][grad_tree]") {
  Params p;
  GradientTree tree(p.named());
  const std::vector<float>& v = kValues;
  for (const int64_t n : {1, 2, 4, 5, 7}) {
    std::vector<int64_t> lasts;
    float early = 0;
    tree.run(0, n, [&](int64_t m, bool last) {
      if (last) lasts.push_back(m);
      add_to_grad(p.a, v[static_cast<size_t>(m)]);
      if (m % 2 == 0) add_to_grad(p.b, v[static_cast<size_t>(m)]);
      if (last) {
        tree.finalize(0);  // a's backward is over; b's is not yet
        early = p.a.grad().data<float>()[0];
      }
    });
    CHECK(lasts == std::vector<int64_t>{n - 1});
    // The same bits as the tree built without finalize, and added only once.
    Params q;
    GradientTree plain(q.named());
    plain.run(0, n, [&](int64_t m, bool) {
      add_to_grad(q.a, v[static_cast<size_t>(m)]);
      if (m % 2 == 0) add_to_grad(q.b, v[static_cast<size_t>(m)]);
    });
    CHECK(early == q.a.grad().data<float>()[0]);
    CHECK(p.a.grad().data<float>()[0] == q.a.grad().data<float>()[0]);
    CHECK(p.b.grad().data<float>()[1] == q.b.grad().data<float>()[1]);
  }
}
