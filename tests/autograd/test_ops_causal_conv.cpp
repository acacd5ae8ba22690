// The Mixer's causal depthwise convolution (SPEC 1.4): orientation, gradient checks,
// fast kernels against the naive oracle, thread-count determinism, errors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "autograd/ops.h"
#include "autograd/ops_causal_conv.h"
#include "core/kernels/causal_conv.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::max_abs_diff;
using test::random_tensor;

TEST_CASE("causal_conv: conv[d, 0] weighs the current token, each sequence starts fresh", "[conv]") {
  // Two sequences of one channel, K = 2: c[t] = a u[t] + b u[t-1].
  const Tensor u = Tensor::from_data<float>({2, 3, 1}, {1, 2, 3, 10, 20, 30});
  const Tensor w = Tensor::from_data<float>({1, 2}, {2, 5});
  for (DType dt : {DType::f32, DType::f64}) {
    const Var c = causal_conv(Var(u.to(dt)), Var(w.to(dt)));
    const std::vector<double> want = {2, 4 + 5, 6 + 10, 20, 40 + 50, 60 + 100};
    for (int64_t i = 0; i < 6; ++i) CHECK(c.value().item(i) == want[static_cast<size_t>(i)]);
  }
}

TEST_CASE("gradcheck: causal_conv", "[conv][gradcheck]") {
  check_gradients([](const std::vector<Var>& x) { return causal_conv(x[0], x[1]); },
                  {random_tensor({2, 6, 3}, 1), random_tensor({3, 4}, 2)});
  // A kernel longer than the sequence.
  check_gradients([](const std::vector<Var>& x) { return causal_conv(x[0], x[1]); },
                  {random_tensor({3, 2, 5}, 3), random_tensor({5, 4}, 4)});
  check_gradients([](const std::vector<Var>& x) { return causal_conv(x[0], x[1]); },
                  {random_tensor({1, 5, 2}, 5), random_tensor({2, 1}, 6)});
  // u's gradient already in use (scale's backward runs first): added to, not stored.
  check_gradients(
      [](const std::vector<Var>& x) {
        Var conv = causal_conv(x[0], x[1]);
        Var side = scale(x[0], 0.5);
        return add(conv, side);
      },
      {random_tensor({2, 6, 3}, 7), random_tensor({3, 4}, 8)});
}

TEST_CASE("causal_conv kernels: fast float kernels match the naive oracle", "[conv][kernels]") {
  for (int64_t K : {int64_t{1}, int64_t{4}, int64_t{7}}) {
    DYNAMIC_SECTION("K=" << K) {
      const CausalConvDims s{.batch = 3, .time = 37, .dim = 67, .kernel = K};
      const Tensor u64 = random_tensor({3, 37, 67}, 10), w64 = random_tensor({67, K}, 11);
      const Tensor dc64 = random_tensor({3, 37, 67}, 12);
      const Tensor u = u64.to(DType::f32), w = w64.to(DType::f32), dc = dc64.to(DType::f32);
      Tensor c = Tensor::empty(u.shape()), c64 = Tensor::empty(u.shape(), DType::f64);
      causal_conv_forward(c.data<float>(), u.data<float>(), w.data<float>(), s);
      causal_conv_forward_naive(c64.data<double>(), u64.data<double>(), w64.data<double>(), s);
      CHECK(max_abs_diff(c, c64) < 1e-5);
      Tensor du = Tensor::full(u.shape(), 0.25), du64 = Tensor::full(u.shape(), 0.25, DType::f64);
      causal_conv_backward_input(du.data<float>(), dc.data<float>(), w.data<float>(), s);
      causal_conv_backward_input_naive(du64.data<double>(), dc64.data<double>(), w64.data<double>(), s);
      CHECK(max_abs_diff(du, du64) < 1e-5);
      Tensor dw = Tensor::full(w.shape(), 0.25), dw64 = Tensor::full(w.shape(), 0.25, DType::f64);
      causal_conv_backward_kernel(dw.data<float>(), dc.data<float>(), u.data<float>(), s);
      causal_conv_backward_kernel_naive(dw64.data<double>(), dc64.data<double>(), u64.data<double>(), s);
      CHECK(max_abs_diff(dw, dw64) < 1e-4);
    }
  }
}

TEST_CASE("causal_conv's kernel gradient is each (channel, tap)'s float FMA chain over rows in order",
          "[conv][kernels]") {
  // 4 taps take the register path for whole slices (16 channels, or 64 at
  // AVX-512 while there are as many 64-channel slices as threads: 195 on up to 3
  // threads), other tap counts and the last partial slice (67 = 4 x 16 + 3,
  // 195 = 3 x 64 + 3) the buffer path: all must be the plain chain, whatever the
  // thread count.
  for (const auto& [K, D] : {std::pair<int64_t, int64_t>{4, 67}, {3, 67}, {4, 195}}) {
    const CausalConvDims s{.batch = 2, .time = 21, .dim = D, .kernel = K};
    const Tensor u = random_tensor({2, 21, D}, 40).to(DType::f32),
                 dc = random_tensor({2, 21, D}, 41).to(DType::f32);
    std::vector<float> want(static_cast<size_t>(D * K), 0.5f);
    for (int64_t d = 0; d < s.dim; ++d)
      for (int64_t i = 0; i < K; ++i) {
        float acc = 0.0f;
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t t = i; t < s.time; ++t)
            acc = std::fma(dc.data<float>()[(b * s.time + t) * s.dim + d],
                           u.data<float>()[(b * s.time + t - i) * s.dim + d], acc);
        want[d * K + i] += acc;
      }
    test::ThreadCountGuard guard;
    for (int threads : {1, 2, 8}) {
      set_num_threads(threads);
      std::vector<float> got(want.size(), 0.5f);
      causal_conv_backward_kernel(got.data(), dc.data<float>(), u.data<float>(), s);
      INFO("K = " << K << ", D = " << D << ", " << threads << " thread(s)");
      for (size_t j = 0; j < want.size(); ++j)
        REQUIRE(std::bit_cast<uint32_t>(got[j]) == std::bit_cast<uint32_t>(want[j]));
    }
  }
}

TEST_CASE("causal_conv's backward in one pass gives the bits of its input and kernel gradients",
          "[conv][kernels][determinism]") {
  // Four taps over whole slices of channels run the one-pass kernel (slices of 16
  // or 32); 67 channels and 3 taps fall back to the two calls. Sequences shorter
  // than the kernel too, du stored (overwrite, over NaN) or added to.
  test::ThreadCountGuard guard;
  for (const auto& [K, D] : {std::pair<int64_t, int64_t>{4, 64}, {4, 96}, {4, 67}, {3, 64}})
    for (const int64_t T : {2, 21})
      for (const bool overwrite : {false, true})
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          const CausalConvDims s{.batch = 2, .time = T, .dim = D, .kernel = K};
          const Tensor u = random_tensor({2, T, D}, 60).to(DType::f32),
                       dc = random_tensor({2, T, D}, 61).to(DType::f32),
                       w = random_tensor({D, K}, 62).to(DType::f32);
          const float start = overwrite ? std::numeric_limits<float>::quiet_NaN() : 0.25f;
          std::vector<float> du_two(static_cast<size_t>(2 * T * D), start), du_one(du_two.size(), start),
              dw_two(static_cast<size_t>(D * K), 0.5f), dw_one(dw_two);
          causal_conv_backward_input(du_two.data(), dc.data<float>(), w.data<float>(), s, overwrite);
          causal_conv_backward_kernel(dw_two.data(), dc.data<float>(), u.data<float>(), s);
          causal_conv_backward(du_one.data(), dw_one.data(), dc.data<float>(), u.data<float>(),
                               w.data<float>(), s, overwrite);
          INFO("K " << K << " D " << D << " T " << T << (overwrite ? " overwrite" : " add") << ", " << threads
                    << " thread(s)");
          CHECK(test::same_bits(du_one, du_two));
          CHECK(test::same_bits(dw_one, dw_two));
        }
}

TEST_CASE("causal_conv streaming: chunks continued from a history give the bits of one pass",
          "[conv][kernels]") {
  // One sequence of T tokens after H = K-1 earlier ones: the earlier ones as the
  // first call's history, the rest in uneven chunks (one shorter than the history).
  const int64_t K = 4, H = K - 1, T = 23, D = 19;
  const Tensor joined = random_tensor({1, H + T, D}, 50, DType::f32);
  const Tensor w = random_tensor({D, K}, 51, DType::f32);
  Tensor full = Tensor::empty(joined.shape());
  causal_conv_forward(full.data<float>(), joined.data<float>(), w.data<float>(), {1, H + T, D, K});

  std::vector<float> history(joined.data<float>(), joined.data<float>() + H * D);
  std::vector<float> c(static_cast<size_t>(T * D));
  int64_t t0 = 0;
  for (int64_t chunk : {int64_t{5}, int64_t{1}, int64_t{2}, int64_t{15}}) {
    causal_conv_forward_streaming(c.data() + t0 * D, joined.data<float>() + (H + t0) * D, history.data(),
                                  w.data<float>(), {1, chunk, D, K});
    t0 += chunk;
    // The history is the last H inputs so far, oldest first.
    for (int64_t i = 0; i < H * D; ++i) REQUIRE(history[i] == joined.data<float>()[t0 * D + i]);
  }
  REQUIRE(t0 == T);
  for (int64_t i = 0; i < T * D; ++i) {
    INFO("element " << i);
    REQUIRE(std::bit_cast<uint32_t>(c[i]) == std::bit_cast<uint32_t>(full.data<float>()[H * D + i]));
  }
  CHECK_THROWS_WITH(causal_conv_forward_streaming(c.data(), joined.data<float>(), history.data(),
                                                  w.data<float>(), {2, 1, D, K}),
                    Catch::Contains("one sequence"));
}

TEST_CASE("causal_conv gives the same bits with 1 and 2 threads", "[conv][determinism]") {
  test::ThreadCountGuard guard;
  const Tensor u = random_tensor({4, 256, 96}, 20, DType::f32);
  const Tensor w = random_tensor({96, 4}, 21, DType::f32);
  const Tensor seed = random_tensor({4, 256, 96}, 22, DType::f32);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var uv(u, true), wv(w, true);
    Var c = causal_conv(uv, wv);
    c.backward(seed);
    return std::vector<Tensor>{c.value(), uv.grad(), wv.grad()};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("output " << i);
    CHECK(bitwise_equal(one[i], two[i]));
  }
}

TEST_CASE("causal_conv rejects mismatched shapes", "[conv][errors]") {
  const Var u(random_tensor({2, 5, 3}, 30, DType::f32));
  CHECK_THROWS_WITH(causal_conv(u, Var(random_tensor({4, 2}, 31, DType::f32))),
                    Catch::Contains("conv must be [D, K] with D = 3"));
  CHECK_THROWS_WITH(causal_conv(u, Var(Tensor::zeros({3, 0}))), Catch::Contains("K >= 1"));
  CHECK_THROWS_WITH(
      causal_conv(Var(random_tensor({10, 3}, 32, DType::f32)), Var(random_tensor({3, 2}, 33, DType::f32))),
      Catch::Contains("u must be [B, T, D]"));
  CHECK_THROWS_WITH(causal_conv(u, Var(random_tensor({3, 2}, 34))), Catch::Contains("conv is f64"));
}
