// A finite-difference gradient check for every autograd op, on odd shapes, in
// double and in float.
#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "autograd/ops_moe.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::random_indices;
using test::random_tensor;

TEST_CASE("gradcheck: matmul in all transpose combinations", "[autograd][gradcheck]") {
  const int64_t M = 5, K = 7, N = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      DYNAMIC_SECTION("trans_a " << ta << " trans_b " << tb) {
        Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, 1);
        Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 2);
        check_gradients([=](const std::vector<Var>& x) { return matmul(x[0], x[1], ta, tb); }, {a, b});
      }
    }
}

TEST_CASE("gradcheck: matmul with leading batch dims", "[autograd][gradcheck]") {
  Tensor a = random_tensor({2, 3, 5}, 3);
  Tensor w = random_tensor({4, 5}, 4);  // a Linear weight [out, in]
  check_gradients([](const std::vector<Var>& x) { return matmul(x[0], x[1], false, true); }, {a, w});
}

TEST_CASE("gradcheck: add, sub, mul with equal shapes and row broadcasting", "[autograd][gradcheck]") {
  using BinaryFn = Var (*)(const Var&, const Var&);
  const std::pair<const char*, BinaryFn> ops[] = {{"add", add}, {"sub", sub}, {"mul", mul}};
  for (const auto& [name, op] : ops) {
    DYNAMIC_SECTION(name << " same shape") {
      check_gradients([op = op](const std::vector<Var>& x) { return op(x[0], x[1]); },
                      {random_tensor({3, 7}, 5), random_tensor({3, 7}, 6)});
    }
    DYNAMIC_SECTION(name << " broadcast [7] over [5, 3, 7]") {
      check_gradients([op = op](const std::vector<Var>& x) { return op(x[0], x[1]); },
                      {random_tensor({5, 3, 7}, 7), random_tensor({7}, 8)});
    }
    DYNAMIC_SECTION(name << " broadcast [3, 7] over [2, 3, 7]") {
      check_gradients([op = op](const std::vector<Var>& x) { return op(x[0], x[1]); },
                      {random_tensor({2, 3, 7}, 9), random_tensor({3, 7}, 10)});
    }
  }
}

TEST_CASE("gradcheck: the same input used twice accumulates", "[autograd][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return mul(x[0], x[0]); }, {random_tensor({3, 5}, 11)});
  check_gradients(
      [](const std::vector<Var>& x) { return add(matmul(x[0], x[0], false, true), scale(x[1], 2.0)); },
      {random_tensor({4, 3}, 12), random_tensor({4, 4}, 13)});
}

TEST_CASE("gradcheck: scale, sum, mean", "[autograd][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return scale(x[0], -1.7); }, {random_tensor({3, 5}, 14)});
  check_gradients([](const std::vector<Var>& x) { return sum(x[0]); }, {random_tensor({3, 5, 2}, 15)});
  check_gradients([](const std::vector<Var>& x) { return mean(x[0]); }, {random_tensor({7, 3}, 16)});
}

TEST_CASE("gradcheck: reshape, slice_last, concat_last", "[autograd][gradcheck]") {
  check_gradients(
      [](const std::vector<Var>& x) {
        return mul(reshape(x[0], {5, 6}), x[1]);
      },
      {random_tensor({3, 10}, 17), random_tensor({6}, 18)});
  check_gradients([](const std::vector<Var>& x) { return slice_last(x[0], 2, 7); },
                  {random_tensor({3, 4, 9}, 19)});
  check_gradients(
      [](const std::vector<Var>& x) {
        return concat_last({x[0], x[1], x[2]});
      },
      {random_tensor({3, 2}, 20), random_tensor({3, 5}, 21), random_tensor({3, 1}, 22)});
}

TEST_CASE("gradcheck: gather_rows and scatter_add_rows with repeated indices", "[autograd][gradcheck]") {
  const Tensor idx = Tensor::from_data<int32_t>({2, 4}, {3, 0, 3, 6, 1, 3, 6, 6});
  check_gradients([idx](const std::vector<Var>& x) { return gather_rows(x[0], idx); },
                  {random_tensor({7, 5}, 23)});
  check_gradients([idx](const std::vector<Var>& x) { return scatter_add_rows(x[0], idx, 9); },
                  {random_tensor({2, 4, 3}, 24)});
  const Tensor many = random_indices({37}, 11, 25);
  check_gradients([many](const std::vector<Var>& x) { return gather_rows(x[0], many); },
                  {random_tensor({11, 3}, 26)});
}

// log(1 + e^-1) and 1 / (1 + e^-1): the row [1e4, 0, -1e4, 9999] in double.
TEST_CASE("log_softmax and cross_entropy keep their accuracy at logits of 1e4", "[autograd][softmax]") {
  const double log_sum = std::log1p(std::exp(-1.0)), top = 1.0 / (1.0 + std::exp(-1.0));
  const Var x(Tensor::from_data<float>({1, 4}, {1e4f, 0.0f, -1e4f, 9999.0f}), true);
  const Tensor y = log_softmax(x).value();
  CHECK(y.item(0) == Approx(-log_sum).epsilon(1e-6));
  CHECK(y.item(3) == Approx(-1.0 - log_sum).epsilon(1e-6));
  const Var loss = cross_entropy(x, Tensor::from_data<int32_t>({1}, {3}));
  CHECK(loss.value().item() == Approx(1.0 + log_sum).epsilon(1e-6));
  loss.backward();
  CHECK(x.grad().item(0) == Approx(top).epsilon(1e-6));
  CHECK(x.grad().item(3) == Approx(-top).epsilon(1e-6));
  CHECK(std::abs(x.grad().item(0) + x.grad().item(1) + x.grad().item(2) + x.grad().item(3)) < 1e-6);
}

TEST_CASE("gradcheck: softmax, log_softmax", "[autograd][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return softmax(x[0]); },
                  {random_tensor({4, 7}, 27, DType::f64, -3, 3)});
  check_gradients([](const std::vector<Var>& x) { return log_softmax(x[0]); },
                  {random_tensor({2, 3, 5}, 28, DType::f64, -3, 3)});
}

TEST_CASE("gradcheck: cross_entropy", "[autograd][gradcheck]") {
  const Tensor targets = Tensor::from_data<int32_t>({2, 3}, {0, 10, 4, 4, 7, 1});
  check_gradients([targets](const std::vector<Var>& x) { return cross_entropy(x[0], targets); },
                  {random_tensor({2, 3, 11}, 29, DType::f64, -4, 4)});
}

TEST_CASE("gradcheck: rms_norm", "[autograd][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return rms_norm(x[0], x[1]); },
                  {random_tensor({3, 2, 13}, 30), random_tensor({13}, 31, DType::f64, 0.5, 1.5)});
}

TEST_CASE("gradcheck: gelu, silu, sigmoid", "[autograd][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return gelu(x[0]); },
                  {random_tensor({5, 7}, 32, DType::f64, -4, 4)});
  check_gradients([](const std::vector<Var>& x) { return silu(x[0]); },
                  {random_tensor({5, 7}, 33, DType::f64, -4, 4)});
  check_gradients([](const std::vector<Var>& x) { return sigmoid(x[0]); },
                  {random_tensor({5, 7}, 34, DType::f64, -4, 4)});
}

TEST_CASE("gradcheck: a composed two-layer network", "[autograd][gradcheck]") {
  const Tensor targets = Tensor::from_data<int32_t>({5}, {1, 0, 2, 2, 1});
  check_gradients(
      [targets](const std::vector<Var>& x) {
        Var h = gelu(add(matmul(x[0], x[1], false, true), x[2]));
        h = rms_norm(h, x[3]);
        return cross_entropy(matmul(h, x[4]), targets);
      },
      {random_tensor({5, 4}, 35), random_tensor({6, 4}, 36), random_tensor({6}, 37),
       random_tensor({6}, 38, DType::f64, 0.5, 1.5), random_tensor({6, 3}, 39)});
}

TEST_CASE("gradcheck fails on a wrong backward", "[autograd][gradcheck]") {
  // An op whose backward is off by a factor: the check must notice.
  auto wrong_square = [](const std::vector<Var>& x) {
    Tensor y = x[0].value().clone();
    y.vector<double>() = y.vector<double>().array().square();
    const Tensor in = x[0].value();
    return record("wrong_square", y, {x[0]}, [in](Node& n) {
      n.input_grad(0).vector<double>().array() +=
          3.0 * in.vector<double>().array() * n.out_grad.vector<double>().array();
    });
  };
  const GradcheckResult r = gradcheck(wrong_square, {random_tensor({4}, 40)});
  CHECK_FALSE(r.ok);
  CHECK(r.report.find("input 0") != std::string::npos);
  // Directions mode (the whole-model checks use it) must notice too, on a large
  // input and with a backward wrong in one element only.
  GradcheckOptions opts;
  opts.directions = 4;
  const GradcheckResult rd = gradcheck(wrong_square, {random_tensor({64, 48}, 43)}, opts);
  CHECK_FALSE(rd.ok);
  CHECK(rd.report.find("input 0") != std::string::npos);
  auto one_wrong = [](const std::vector<Var>& x) {
    Tensor y = x[0].value().clone();
    y.vector<double>() = y.vector<double>().array().square();
    const Tensor in = x[0].value();
    return record("one_wrong", y, {x[0]}, [in](Node& n) {
      auto g = n.input_grad(0).vector<double>();
      g.array() += 2.0 * in.vector<double>().array() * n.out_grad.vector<double>().array();
      g[17] += n.out_grad.vector<double>()[17];  // element 17 alone is off
    });
  };
  CHECK(gradcheck(one_wrong, {random_tensor({64, 48}, 44)}).ok == false);
  CHECK_FALSE(gradcheck(one_wrong, {random_tensor({64, 48}, 44)}, opts).ok);
}

TEST_CASE("the float gradcheck notices a mean's gradient off by 10%", "[autograd][gradcheck]") {
  // mean over 66 values: gradients of about 1/66, under a fixed atol of 5e-3
  // times 2; the float check's atol follows the input's largest gradient.
  for (const double factor : {0.9, 1.0, 1.1}) {
    auto scaled_mean = [factor](const std::vector<Var>& x) {
      const Var m = mean(x[0]);
      return record("scaled_grad", m.value().clone(), {m}, [factor](Node& n) {
        dispatch_floating(n.out_dtype, "scaled_grad", [&](auto zero) {
          using T = decltype(zero);
          n.input_grad(0).data<T>()[0] += static_cast<T>(factor) * n.out_grad.data<T>()[0];
        });
      });
    };
    INFO("factor " << factor);
    const Tensor x = random_tensor({6, 11}, 45).to(DType::f32);
    CHECK(gradcheck(scaled_mean, {x}, test::float_gradcheck_options()).ok == (factor == 1.0));
  }
}

TEST_CASE("gradcheck directions mode agrees on a large input", "[autograd][gradcheck]") {
  GradcheckOptions opts;
  opts.directions = 4;
  const GradcheckResult r =
      gradcheck([](const std::vector<Var>& x) { return rms_norm(gelu(x[0]), x[1]); },
                {random_tensor({64, 48}, 41), random_tensor({48}, 42, DType::f64, 0.5, 1.5)}, opts);
  INFO(r.report);
  CHECK(r.ok);
}

// rms_norm and moe_combine store into a fresh input gradient (no zero fill) and
// add into one that already holds another consumer's contribution: both paths.
TEST_CASE("gradcheck: rms_norm and moe_combine write a fresh input gradient, add to one in use",
          "[autograd][gradcheck]") {
  check_gradients(
      [](const std::vector<Var>& x) {
        Var normed = rms_norm(x[0], x[1]);  // runs last in backward: x[0]'s gradient is in use
        Var side = scale(x[0], 0.5);
        return add(normed, side);
      },
      {random_tensor({4, 9}, 60), random_tensor({9}, 61, DType::f64, 0.5, 1.5)});
  check_gradients(
      [](const std::vector<Var>& x) {
        Var side = scale(x[0], 0.5);
        Var normed = rms_norm(x[0], x[1]);  // runs first in backward: a fresh gradient
        return add(normed, side);
      },
      {random_tensor({4, 9}, 62), random_tensor({9}, 63, DType::f64, 0.5, 1.5)});
  // 5 tokens, 2 slots each, 3 experts: expert_rows [10, 4] in plan order. Alone,
  // the rows' gradient is fresh; twice, the second combine's backward (first to
  // run) writes it and the first one's adds.
  const Tensor experts = Tensor::from_data<int32_t>({5, 2}, {0, 2, 1, 0, 2, 1, 0, 1, 2, 0});
  const MoeDispatch plan = plan_dispatch(experts, 3);
  const std::vector<Tensor> moe_inputs{random_tensor({10, 4}, 64),
                                       random_tensor({5, 2}, 65, DType::f64, 0.1, 1.0)};
  check_gradients([&plan](const std::vector<Var>& x) { return moe_combine(x[0], x[1], plan); }, moe_inputs);
  check_gradients(
      [&plan](const std::vector<Var>& x) {
        Var once = moe_combine(x[0], x[1], plan);
        Var again = moe_combine(scale(x[0], 3.0), x[1], plan);
        return add(once, again);
      },
      moe_inputs);
}

// The residual's gradient is handed to its producer where it can take it (an
// op's output), else added (a leaf; an op output whose gradient is in use).
TEST_CASE("gradcheck: moe_combine with a residual, handed over and added", "[autograd][gradcheck]") {
  const Tensor experts = Tensor::from_data<int32_t>({5, 2}, {0, 2, 1, 0, 2, 1, 0, 1, 2, 0});
  const MoeDispatch plan = plan_dispatch(experts, 3);
  const std::vector<Tensor> inputs{
      random_tensor({10, 4}, 66), random_tensor({5, 2}, 67, DType::f64, 0.1, 1.0), random_tensor({5, 4}, 68)};
  check_gradients([&plan](const std::vector<Var>& x) { return moe_combine(x[0], x[1], plan, x[2]); }, inputs);
  check_gradients(
      [&plan](const std::vector<Var>& x) { return moe_combine(x[0], x[1], plan, scale(x[2], 2.0)); }, inputs);
  check_gradients(
      [&plan](const std::vector<Var>& x) {
        Var r = scale(x[2], 2.0);
        Var y = moe_combine(x[0], x[1], plan, r);
        return mul(y, r);  // runs first in backward: r's gradient is in use
      },
      inputs);
}

// The residual is the op's other input, made by one op: its gradient must not
// be handed over while the op still reads dy to write that input's gradient.
TEST_CASE("gradcheck: moe_combine whose residual is its expert rows", "[autograd][gradcheck]") {
  const MoeDispatch plan = plan_dispatch(Tensor::from_data<int32_t>({5, 1}, {2, 0, 1, 0, 2}), 3);
  check_gradients(
      [&plan](const std::vector<Var>& x) {
        const Var rows = scale(x[0], 2.0);
        return moe_combine(rows, x[1], plan, rows);
      },
      {random_tensor({5, 4}, 71), random_tensor({5, 1}, 72, DType::f64, 0.1, 1.0)});
}

// add's second operand of the first's shape gets dy stored into a fresh
// gradient, or added to one in use.
TEST_CASE("gradcheck: add's second operand, fresh and in use", "[autograd][gradcheck]") {
  const std::vector<Tensor> inputs{random_tensor({3, 5}, 69), random_tensor({3, 5}, 70)};
  check_gradients([](const std::vector<Var>& x) { return add(x[0], scale(x[1], 2.0)); }, inputs);
  check_gradients(
      [](const std::vector<Var>& x) {
        Var b = scale(x[1], 2.0);
        return mul(add(x[0], b), b);  // mul's backward runs first: b's gradient is in use
      },
      inputs);
}
