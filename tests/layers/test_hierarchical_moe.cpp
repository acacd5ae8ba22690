// HierarchicalMoE against a slow per-token reference of SPEC 1.6, its gradient
// check, and thread-count independence.
#include <cmath>
#include <map>
#include <numeric>

#include "autograd/ops.h"
#include "core/kernels/block_sparse.h"
#include "helpers.h"
#include "layers/hierarchical_moe.h"

using namespace shamn;

namespace {

MoeOptions tiny_moe(int64_t dim = 16, int64_t groups = 2, int64_t per_group = 3, int64_t group_k = 1,
                    int64_t k = 2) {
  MoeOptions o;
  o.dim = dim;
  o.groups = groups;
  o.experts_per_group = per_group;
  o.group_k = group_k;
  o.k = k;
  o.hidden = 2 * dim;
  o.up = {dim, o.hidden, 8, 0.5, true, "model.moe.sparsity"};
  o.down = {o.hidden, dim, 8, 0.5, true, "model.moe.sparsity"};
  return o;
}

// Everything in double from the parameter tensors: the SPEC read literally.
struct Reference {
  std::vector<double> y;
  double aux = 0;
};

Reference reference_moe(const HierarchicalMoE& moe, const Tensor& u) {
  const MoeOptions& o = moe.options();
  const int64_t n = u.numel() / o.dim, X = o.experts(), E = o.experts_per_group;
  std::map<std::string, Tensor> p;
  for (const auto& np : moe.named_parameters()) p[np.name] = np.var.value().to(DType::f64);
  std::map<std::string, Tensor> b;
  for (const auto& nb : moe.named_buffers()) b[nb.name] = nb.tensor;
  const Tensor ud = u.to(DType::f64);
  Reference r;
  r.y.assign(static_cast<size_t>(n * o.dim), 0.0);
  std::vector<double> pbar(X, 0.0), count(X, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const double* x = ud.data<double>() + t * o.dim;
    auto logits = [&](const std::string& name, int64_t rows) {
      std::vector<double> out(rows, 0.0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t d = 0; d < o.dim; ++d) out[i] += p[name].data<double>()[i * o.dim + d] * x[d];
      return out;
    };
    auto softmax = [](std::vector<double> v) {
      double m = *std::max_element(v.begin(), v.end()), s = 0;
      for (double& e : v) s += (e = std::exp(e - m));
      for (double& e : v) e /= s;
      return v;
    };
    const auto pg = softmax(logits("router_group.weight", o.groups));
    const auto re = logits("router_expert.weight", X);
    std::vector<double> P(X);
    for (int64_t g = 0; g < o.groups; ++g) {
      const auto pe = softmax(std::vector<double>(re.begin() + g * E, re.begin() + (g + 1) * E));
      for (int64_t j = 0; j < E; ++j) P[g * E + j] = pg[g] * pe[j];
    }
    for (int64_t e = 0; e < X; ++e) pbar[e] += P[e] / n;
    // Top group_k groups, then top k experts among them (ties: lower index).
    std::vector<int64_t> groups(o.groups);
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(), [&](auto a, auto c) { return pg[a] > pg[c]; });
    std::vector<int64_t> cand;
    for (int64_t i = 0; i < o.group_k; ++i)
      for (int64_t j = 0; j < E; ++j) cand.push_back(groups[i] * E + j);
    std::sort(cand.begin(), cand.end());
    std::stable_sort(cand.begin(), cand.end(), [&](auto a, auto c) { return P[a] > P[c]; });
    double total = 0;
    for (int64_t i = 0; i < o.k; ++i) total += P[cand[i]];
    for (int64_t i = 0; i < o.k; ++i) {
      const int64_t e = cand[i];
      count[e] += 1;
      const std::string pre = "experts." + std::to_string(e) + ".";
      const auto& up = moe.expert(e);
      (void)up;
      BlockSparseDims du{o.dim, o.hidden, o.up.block, o.up.active_blocks()};
      BlockSparseDims dd{o.hidden, o.dim, o.down.block, o.down.active_blocks()};
      std::vector<double> h(o.hidden), y(o.dim);
      block_sparse_forward_naive(h.data(), x, p[pre + "up.values"].data<double>(),
                                 b[pre + "up.col_index"].data<int32_t>(), p[pre + "up.bias"].data<double>(),
                                 1, du);
      for (double& v : h) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      block_sparse_forward_naive(y.data(), h.data(), p[pre + "down.values"].data<double>(),
                                 b[pre + "down.col_index"].data<int32_t>(),
                                 p[pre + "down.bias"].data<double>(), 1, dd);
      for (int64_t d = 0; d < o.dim; ++d) r.y[t * o.dim + d] += P[e] / total * y[d];
    }
  }
  for (int64_t e = 0; e < X; ++e) r.aux += X * (count[e] / (n * o.k)) * pbar[e];
  return r;
}

}  // namespace

TEST_CASE("HierarchicalMoE matches a per-token reference of SPEC 1.6", "[layers][moe]") {
  for (auto [groups, per_group, group_k, k] :
       {std::tuple{2, 3, 1, 2}, std::tuple{4, 4, 1, 2}, std::tuple{3, 2, 2, 3}}) {
    DYNAMIC_SECTION("G " << groups << " E " << per_group << " group_k " << group_k << " k " << k) {
      HierarchicalMoE moe(tiny_moe(16, groups, per_group, group_k, k));
      moe.init(7);
      const Tensor u = test::random_tensor({3, 37, 16}, 11, DType::f32, -2, 2);
      NoGradGuard no_grad;
      const auto out = moe.forward(Var(u));
      const Reference ref = reference_moe(moe, u);
      CHECK(out.y.shape() == u.shape());
      double max_err = 0;
      for (size_t i = 0; i < ref.y.size(); ++i)
        max_err = test::worse(max_err, std::abs(out.y.value().item(static_cast<int64_t>(i)) - ref.y[i]));
      CHECK(max_err < 1e-5);
      CHECK(out.aux.value().item() == Approx(ref.aux).epsilon(1e-5));
    }
  }
}

TEST_CASE("HierarchicalMoE gradient check (output and aux)", "[layers][moe][gradcheck]") {
  HierarchicalMoE moe(tiny_moe(16, 2, 2, 1, 2));
  moe.init(3);
  moe.to(DType::f64);
  Var u(test::random_tensor({2, 5, 16}, 12, DType::f64, -2, 2), true);
  std::vector<Var> leaves{u};
  for (const auto& p : moe.named_parameters()) leaves.push_back(p.var);
  const GradcheckResult r = gradcheck_leaves(
      [&] {
        const auto out = moe.forward(u);
        return concat_last({reshape(out.y, {-1}), reshape(scale(out.aux, 10.0), {1})});
      },
      leaves);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("HierarchicalMoE is bit-identical with 1 and 2 threads", "[layers][moe][determinism]") {
  test::ThreadCountGuard guard;
  auto run = [](int threads) {
    set_num_threads(threads);
    HierarchicalMoE moe(tiny_moe(64, 4, 4, 1, 2));
    moe.init(5);
    Var u(test::random_tensor({4, 128, 64}, 13, DType::f32, -2, 2), true);
    const auto out = moe.forward(u);
    add(sum(mul(out.y, out.y)), out.aux).backward();
    std::vector<Tensor> grads{out.y.value(), u.grad()};
    for (const auto& p : moe.named_parameters())
      grads.push_back(p.var.grad().defined() ? p.var.grad() : Tensor::zeros({1}));
    return grads;
  };
  const auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("tensor " << i);
    CHECK(bitwise_equal(one[i], two[i]));
  }
}

TEST_CASE("HierarchicalMoE's residual gives the bits of adding it afterwards", "[layers][moe][determinism]") {
  HierarchicalMoE moe(tiny_moe(64, 4, 4, 1, 2));
  moe.init(6);
  auto run = [&moe](bool fused) {
    for (const auto& p : moe.named_parameters()) p.var.zero_grad();
    Var x(test::random_tensor({2, 96, 64}, 14, DType::f32, -2, 2), true);
    Var u = rms_norm(x, Var(Tensor::full({64}, 1.0)));
    const auto out = fused ? moe.forward(u, x) : moe.forward(u);
    const Var y = fused ? out.y : add(x, out.y);
    add(sum(mul(y, y)), out.aux).backward();
    std::vector<Tensor> values{y.value(), x.grad()};
    for (const auto& p : moe.named_parameters())
      values.push_back(p.var.grad().defined() ? p.var.grad() : Tensor::zeros({1}));
    return values;
  };
  const auto added = run(false), fused = run(true);
  for (size_t i = 0; i < added.size(); ++i) {
    INFO("tensor " << i);
    CHECK(bitwise_equal(added[i], fused[i]));
  }
}

TEST_CASE("MoE names follow SPEC section 4", "[layers][moe]") {
  HierarchicalMoE moe(tiny_moe(16, 2, 2, 1, 2));
  std::vector<std::string> names;
  for (const auto& p : moe.named_parameters()) names.push_back(p.name);
  CHECK(names.front() == "router_group.weight");
  CHECK(names[1] == "router_expert.weight");
  CHECK(names[2] == "experts.0.up.values");
  CHECK(names.back() == "experts.3.down.bias");
  CHECK(moe.named_buffers().front().name == "experts.0.up.col_index");
}
