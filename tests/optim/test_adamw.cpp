// AdamW against steps computed by hand from SPEC section 3, clipping, parameter
// groups, state save/restore, and the learning-rate schedule.
#include <catch2/catch.hpp>

#include <cmath>

#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_schedule.h"

using namespace shamn;

namespace {

// SPEC 3 in double for one scalar parameter.
struct ScalarAdamW {
  double theta, m = 0, v = 0;
  int t = 0;
  void step(double g, double lr, double wd, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8) {
    ++t;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double m_hat = m / (1 - std::pow(b1, t));
    const double v_hat = v / (1 - std::pow(b2, t));
    theta -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * theta);
  }
};

Var param(std::vector<float> values) {
  return Var(Tensor::from_data<float>({static_cast<int64_t>(values.size())}, values), true);
}

void set_grad(Var& p, std::vector<float> g) {
  p.set_grad(Tensor::from_data<float>({static_cast<int64_t>(g.size())}, g));
}

}  // namespace

TEST_CASE("AdamW first step, decay off, matches the hand computation", "[optim][adamw]") {
  Var p = param({1.0f, -2.0f});
  AdamW opt({{"all", {{"p", p}}, 0.0}});
  set_grad(p, {0.5f, -0.1f});
  opt.step(0.1);
  // Step 1: m_hat = g, v_hat = g^2, so theta -= lr * g / (|g| + eps).
  CHECK(p.value().item(0) == Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)).margin(1e-6));
  CHECK(p.value().item(0) == Approx(0.9).margin(1e-6));
  CHECK(p.value().item(1) == Approx(-1.9).margin(1e-6));
}

TEST_CASE("AdamW first step, decay on, matches the hand computation", "[optim][adamw]") {
  Var p = param({1.0f, -2.0f});
  AdamW opt({{"decay", {{"p", p}}, 0.1}});
  set_grad(p, {0.5f, -0.1f});
  opt.step(0.1);
  // theta -= lr * (sign(g) + wd * theta): 1 - 0.1*(1 + 0.1) and -2 - 0.1*(-1 - 0.2).
  CHECK(p.value().item(0) == Approx(0.89).margin(1e-6));
  CHECK(p.value().item(1) == Approx(-1.88).margin(1e-6));
}

TEST_CASE("AdamW over several steps with two groups follows SPEC 3", "[optim][adamw]") {
  Var a = param({0.3f, -0.7f, 1.2f});
  Var b = param({0.05f});
  AdamWOptions options;
  options.beta1 = 0.8;
  options.beta2 = 0.95;
  options.eps = 1e-6;
  AdamW opt({{"decay", {{"a", a}}, 0.05}, {"no_decay", {{"b", b}}, 0.0}}, options);
  std::vector<ScalarAdamW> ref{{0.3f}, {-0.7f}, {1.2f}, {0.05f}};
  const double grads[4][4] = {
      {0.2, -1.0, 0.03, 0.4}, {-0.1, -0.5, 0.06, -0.2}, {0.3, 0.7, -0.02, 0.1}, {0.0, 0.1, 0.01, -0.3}};
  const double lrs[4] = {0.01, 0.02, 0.015, 0.005};
  for (int s = 0; s < 4; ++s) {
    set_grad(a, {float(grads[s][0]), float(grads[s][1]), float(grads[s][2])});
    set_grad(b, {float(grads[s][3])});
    opt.step(lrs[s]);
    for (int i = 0; i < 4; ++i) ref[i].step(float(grads[s][i]), lrs[s], i < 3 ? 0.05 : 0.0, 0.8, 0.95, 1e-6);
  }
  CHECK(opt.step_count() == 4);
  for (int i = 0; i < 3; ++i) CHECK(a.value().item(i) == Approx(ref[i].theta).margin(1e-6));
  CHECK(b.value().item(0) == Approx(ref[3].theta).margin(1e-6));
}

TEST_CASE("AdamW counts t per parameter: one first reached at step 3 takes a first update",
          "[optim][adamw]") {
  // torch.optim.AdamW keeps a step per parameter (SPEC 3: "equivalently"); a
  // parameter without a gradient (an expert no token reached) is not stepped.
  Var a = param({0.3f});
  Var late = param({-0.6f});
  AdamW opt({{"d", {{"a", a}, {"late", late}}, 0.1}});
  ScalarAdamW ref_a{0.3f}, ref_late{-0.6f};
  const double grads[4] = {0.2, -0.4, 0.5, 0.1};
  for (int s = 0; s < 4; ++s) {
    set_grad(a, {float(grads[s])});
    ref_a.step(float(grads[s]), 0.01, 0.1);
    if (s >= 2) {
      set_grad(late, {float(-grads[s])});
      ref_late.step(float(-grads[s]), 0.01, 0.1);
    }
    opt.step(0.01);
    if (s == 2) {  // its first update moves it by lr (1 + wd theta): Adam's first step is sign(g)
      CHECK(late.value().item(0) == Approx(-0.6 + 0.01 * (1 - 0.1 * -0.6)).margin(1e-6));
      CHECK(opt.late_updates() == std::vector<std::pair<std::string, int64_t>>{{"late", 1}});
    }
  }
  CHECK(opt.step_count() == 4);
  CHECK(opt.update_counts() == std::vector<int64_t>{4, 2});
  CHECK(a.value().item(0) == Approx(ref_a.theta).margin(1e-6));
  CHECK(late.value().item(0) == Approx(ref_late.theta).margin(1e-6));

  // Restored with its count, a copy continues identically; restored without it
  // (a checkpoint from before the count), the late one takes t = the step.
  for (const bool with_count : {true, false}) {
    Var a2(a.value().clone(), true), late2(late.value().clone(), true);
    AdamW copy({{"d", {{"a", a2}, {"late", late2}}, 0.1}});
    std::vector<NamedTensor> saved;
    for (const auto& t : opt.state_tensors()) saved.push_back({t.name, t.tensor.clone()});
    copy.load_state(opt.step_count(), saved, {},
                    with_count ? opt.late_updates() : decltype(opt.late_updates()){});
    CHECK(copy.update_counts() == (with_count ? std::vector<int64_t>{4, 2} : std::vector<int64_t>{4, 4}));
  }
  AdamW bad({{"d", {{"a", param({0.0f})}, {"late", param({0.0f})}}, 0.1}});
  std::vector<NamedTensor> saved;
  for (const auto& t : opt.state_tensors()) saved.push_back({t.name, t.tensor.clone()});
  CHECK_THROWS_WITH(bad.load_state(4, saved, {}, {{"late", 4}}),
                    Catch::Contains("late parameter 'late' with 4"));
  CHECK_THROWS_WITH(bad.load_state(4, saved, {"late"}, {{"late", 2}}),
                    Catch::Contains("both unreached and late"));
}

TEST_CASE("global gradient-norm clipping, then AdamW on the clipped gradient", "[optim][adamw][clip]") {
  Var a = param({1.0f, 1.0f});
  Var b = param({-1.0f});
  std::vector<NamedVar> params{{"a", a}, {"b", b}};
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});
  const double norm = clip_grad_norm(params, 1.0);
  CHECK(norm == Approx(5.0).epsilon(1e-12));
  const double f = 1.0 / (5.0 + 1e-6);
  CHECK(a.grad().item(0) == Approx(3.0 * f).margin(1e-7));
  CHECK(b.grad().item(0) == Approx(4.0 * f).margin(1e-7));

  AdamW opt({{"decay", params, 0.01}});
  ScalarAdamW ra{1.0}, rb{-1.0};
  opt.step(0.05);
  ra.step(3.0 * f, 0.05, 0.01);
  rb.step(4.0 * f, 0.05, 0.01);
  // Second step: clipping no longer binds (norm 0.5 < 1), magnitudes now matter.
  set_grad(a, {0.3f, 0.0f});
  set_grad(b, {-0.4f});
  CHECK(clip_grad_norm(params, 1.0) == Approx(0.5).epsilon(1e-6));
  opt.step(0.05);
  ra.step(0.3, 0.05, 0.01);
  rb.step(-0.4, 0.05, 0.01);
  CHECK(a.value().item(0) == Approx(ra.theta).margin(1e-6));
  CHECK(b.value().item(0) == Approx(rb.theta).margin(1e-6));
  // The untouched element only decays: theta * (1 - lr*wd) twice.
  CHECK(a.value().item(1) == Approx(1.0 * (1 - 0.05 * 0.01) * (1 - 0.05 * 0.01)).margin(1e-6));

  set_grad(a, {NAN, 0.0f});
  CHECK(std::isnan(clip_grad_norm(params, 1.0)));
}

TEST_CASE("weight decay groups follow SPEC 3", "[optim][adamw]") {
  auto v = [](Shape s) { return Var(Tensor::zeros(s), true); };
  std::vector<NamedVar> params{{"embed.table", v({8, 4})},
                               {"embed.importance", v({8, 2})},
                               {"layers.0.mix_norm.gain", v({4})},
                               {"layers.0.mixer.conv", v({4, 4})},
                               {"layers.0.mixer.out.values", v({1, 1, 4, 4})},
                               {"layers.0.mixer.out.bias", v({4})},
                               {"layers.0.memory.keys1", v({4, 2})}};
  const auto groups = split_weight_decay(params, 0.1);
  REQUIRE(groups.size() == 2);
  std::vector<std::string> decay, no_decay;
  for (const auto& p : groups[0].params) decay.push_back(p.name);
  for (const auto& p : groups[1].params) no_decay.push_back(p.name);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(decay == std::vector<std::string>{"embed.table", "layers.0.mixer.conv", "layers.0.mixer.out.values",
                                          "layers.0.memory.keys1"});
  CHECK(no_decay ==
        std::vector<std::string>{"embed.importance", "layers.0.mix_norm.gain", "layers.0.mixer.out.bias"});
}

TEST_CASE("AdamW state saved and restored continues identically", "[optim][adamw]") {
  auto run = [](int steps, AdamW* resume_from, Var* resume_param) {
    Var p = resume_param ? *resume_param : param({0.5f, -0.25f, 2.0f});
    auto opt = std::make_unique<AdamW>(std::vector<ParamGroup>{{"d", {{"p", p}}, 0.1}});
    if (resume_from) {
      std::vector<NamedTensor> saved;
      for (const auto& t : resume_from->state_tensors()) saved.push_back({t.name, t.tensor.clone()});
      opt->load_state(resume_from->step_count(), saved);
    }
    for (int s = 0; s < steps; ++s) {
      const float k = static_cast<float>(opt->step_count() + 1);
      set_grad(p, {0.1f * k, -0.2f / k, 0.05f});
      opt->step(0.01 * k);
    }
    return std::make_pair(std::move(opt), p);
  };
  auto [full_opt, full_p] = run(5, nullptr, nullptr);
  auto [half_opt, half_p] = run(3, nullptr, nullptr);
  Var restored_p(half_p.value().clone(), true);
  auto [rest_opt, rest_p] = run(2, half_opt.get(), &restored_p);
  CHECK(rest_opt->step_count() == 5);
  CHECK(bitwise_equal(full_p.value(), rest_p.value()));

  AdamW other({{"d", {{"q", param({0.0f})}}, 0.0}});
  CHECK_THROWS_WITH(other.load_state(1, full_opt->state_tensors()), Catch::Contains("missing tensor 'm.q'"));
  AdamW wrong_shape({{"d", {{"p", param({0.0f})}}, 0.0}});
  CHECK_THROWS_WITH(wrong_shape.load_state(1, full_opt->state_tensors()),
                    Catch::Contains("tensor 'm.p' is f32[3]"));
}

TEST_CASE("linear warm-up then cosine decay to min_lr", "[optim][schedule]") {
  LrSchedule s{1.0, 0.1, 10, 110};
  CHECK(s.at(0) == Approx(0.1));
  CHECK(s.at(4) == Approx(0.5));
  CHECK(s.at(9) == Approx(1.0));
  CHECK(s.at(10) == Approx(1.0));
  CHECK(s.at(60) == Approx(0.55));  // halfway through the cosine
  CHECK(s.at(110) == Approx(0.1));
  CHECK(s.at(500) == Approx(0.1));
  for (int i = 11; i < 110; ++i) CHECK(s.at(i) < s.at(i - 1));
  CHECK_THROWS_WITH((LrSchedule{1.0, 2.0, 0, 10}.validate()), Catch::Contains("optim.min_lr"));
  CHECK_THROWS_WITH((LrSchedule{1.0, 0.0, 20, 10}.validate()), Catch::Contains("optim.warmup_steps"));
}

// The trainer clips inside AdamW (step's grad_scale) instead of scaling the
// gradients in place first: the same float products, so the same bits.
TEST_CASE("AdamW with clip_scale's factor equals clipping the gradients in place first", "[optim][adamw]") {
  const char* names[] = {"p0", "p1", "p2"};
  auto values = [](int64_t n, int k, float f) {  // a ragged tail after several norm chunks
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = std::sin(f * static_cast<float>(i * (k + 1) + k));
    return x;
  };
  auto make = [&] {
    std::vector<NamedVar> ps;
    for (int k = 0; k < 3; ++k) {
      const int64_t n = 40000 + 1237 * k;
      ps.push_back({names[k], Var(Tensor::from_data<float>({n}, values(n, k, 0.37f)), true)});
    }
    return ps;
  };
  auto set_grads = [&](std::vector<NamedVar>& ps, int step) {  // norm ~ 200: clipping binds
    for (int k = 0; k < 3; ++k) {
      const int64_t n = ps[static_cast<size_t>(k)].var.numel();
      ps[static_cast<size_t>(k)].var.set_grad(Tensor::from_data<float>({n}, values(n, k + step, 0.11f)));
    }
  };
  std::vector<NamedVar> a = make(), b = make();
  AdamW opt_a({{"all", a, 0.1}}), opt_b({{"all", b, 0.1}});
  for (int step = 0; step < 2; ++step) {
    set_grads(a, step);
    set_grads(b, step);
    const double norm_a = clip_grad_norm(a, 1.0);
    opt_a.step(1e-3);
    const double norm_b = grad_norm(b);
    CHECK(norm_b == norm_a);
    CHECK(clip_scale(norm_b, 1.0) < 1.0f);
    opt_b.step(1e-3, clip_scale(norm_b, 1.0));
  }
  for (size_t k = 0; k < a.size(); ++k)
    CHECK(a[k].var.value().to_vector<float>() == b[k].var.value().to_vector<float>());
  const auto sa = opt_a.state_tensors(), sb = opt_b.state_tensors();
  for (size_t k = 0; k < sa.size(); ++k)
    CHECK(sa[k].tensor.to_vector<float>() == sb[k].tensor.to_vector<float>());
  CHECK(clip_scale(0.5, 1.0) == 1.0f);
  CHECK(clip_scale(5.0, 0.0) == 1.0f);
  CHECK(clip_scale(NAN, 1.0) == 1.0f);
}

TEST_CASE("grad_norm sums squares in double: within 1e-12 of a long double sum", "[optim][clip]") {
  const int64_t n = 300001;
  std::vector<float> g(static_cast<size_t>(n));
  long double ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    g[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.001 * static_cast<double>(i))) * 1e3f;
    ref += static_cast<long double>(g[static_cast<size_t>(i)]) * g[static_cast<size_t>(i)];
  }
  Var p(Tensor::zeros({n}), true);
  p.set_grad(Tensor::from_data<float>({n}, g));
  const double norm = grad_norm({{"p", p}});
  CHECK(norm == Approx(static_cast<double>(std::sqrt(ref))).epsilon(1e-12));
}
