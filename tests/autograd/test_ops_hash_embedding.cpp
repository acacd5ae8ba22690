// SparseHashEmbedding, the tied HashHead and its fused cross-entropy (SPEC 1.2, 1.7):
// the bucket rule's check values, gradient checks, fast kernels against the naive
// oracle, the fused loss against the unfused ops, thread-count determinism, errors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "autograd/ops.h"
#include "autograd/ops_hash_embedding.h"
#include "core/kernel_level.h"
#include "core/kernels/hash_embedding.h"
#include "core/kernels/hash_head.h"
#include "helpers.h"

using namespace shamn;
using test::check_gradients;
using test::max_abs_diff;
using test::random_indices;
using test::random_tensor;

namespace {

double max_abs(const Tensor& a) {
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.item(i)));
  return m;
}

// |a - b| <= tol * max|b| elementwise, reported with the worst error.
void check_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  const double err = max_abs_diff(a, b), scale = std::max(1e-30, max_abs(b));
  INFO(what << ": max abs error " << err << " against max |value| " << scale);
  CHECK(err <= tol * scale);
}

// A bucket table with deliberate collisions: token 2 hashes twice into bucket 1, and
// tokens 0, 3, 5 share bucket 0.
Tensor colliding_buckets() {
  return Tensor::from_data<int32_t>({7, 2}, {0, 3, 2, 1, 1, 1, 0, 2, 3, 3, 0, 1, 2, 0});
}

struct HeadProblem {
  Tensor z, table, importance, bucket_index, targets;
};

HeadProblem head_problem(int64_t n, int64_t vocab, int64_t buckets, int64_t dim, int64_t hashes,
                         uint64_t seed, DType dtype) {
  HeadProblem p;
  p.z = random_tensor({n, dim}, seed, dtype);
  p.table = random_tensor({buckets, dim}, seed + 1, dtype, -0.5, 0.5);
  p.importance = random_tensor({vocab, hashes}, seed + 2, dtype, 0.2, 1.5);
  p.bucket_index = hash_bucket_index(vocab, hashes, buckets);
  p.targets = random_indices({n}, static_cast<int32_t>(vocab), seed + 3);
  return p;
}

}  // namespace

TEST_CASE("hash buckets follow the SPEC 1.2 rule and its check values", "[hash][embed]") {
  STATIC_REQUIRE(hash_mix64(0x9E3779B97F4A7C15ull) == 0xE220A8397B1DCDAFull);
  const Tensor bi = hash_bucket_index(32000, 2, 1600);
  REQUIRE(bi.shape() == Shape{32000, 2});
  REQUIRE(bi.dtype() == DType::i32);
  const int32_t* b = bi.data<int32_t>();
  CHECK((b[0] == 1135 && b[1] == 500));
  CHECK((b[2] == 65 && b[3] == 1319));
  CHECK((b[2000] == 776 && b[2001] == 1455));
  CHECK((b[63998] == 788 && b[63999] == 30));
  // A third hash extends the rule without changing the first two columns.
  const Tensor bi3 = hash_bucket_index(32000, 3, 1600);
  CHECK((bi3.data<int32_t>()[3 * 1000] == 776 && bi3.data<int32_t>()[3 * 1000 + 1] == 1455));
}

TEST_CASE("hash_bucket_index rejects empty tables and no hashes", "[hash][embed]") {
  CHECK_THROWS_WITH(hash_bucket_index(10, 2, 0), Catch::Contains("bucket count"));
  CHECK_THROWS_WITH(hash_bucket_index(10, 2, -3), Catch::Contains("bucket count"));
  CHECK_THROWS_WITH(hash_bucket_index(10, 0, 16), Catch::Contains("at least one hash"));
  CHECK(hash_bucket_index(0, 1, 1).numel() == 0);
}

TEST_CASE("hash_embedding mixes the token's bucket rows", "[hash][embed]") {
  const Tensor table = Tensor::from_data<float>({3, 2}, {1, 2, 10, 20, 100, 200});
  const Tensor importance = Tensor::from_data<float>({2, 2}, {0.5f, 2.0f, 1.0f, -1.0f});
  const Tensor bi = Tensor::from_data<int32_t>({2, 2}, {0, 2, 1, 1});
  const Tensor tokens = Tensor::from_data<int32_t>({3}, {1, 0, 1});
  for (DType dt : {DType::f32, DType::f64}) {
    const Var e = hash_embedding(Var(table.to(dt)), Var(importance.to(dt)), bi, tokens);
    REQUIRE(e.shape() == Shape{3, 2});
    const std::vector<double> want = {0, 0, 200.5, 401, 0, 0};
    for (int64_t i = 0; i < 6; ++i) CHECK(e.value().item(i) == want[static_cast<size_t>(i)]);
  }
}

TEST_CASE("gradcheck: hash_embedding with repeated tokens and colliding buckets",
          "[hash][embed][gradcheck]") {
  const Tensor bi = colliding_buckets();
  const Tensor tokens = Tensor::from_data<int32_t>({2, 5}, {2, 0, 3, 2, 6, 5, 5, 0, 1, 2});
  check_gradients([=](const std::vector<Var>& x) { return hash_embedding(x[0], x[1], bi, tokens); },
                  {random_tensor({4, 5}, 1), random_tensor({7, 2}, 2)});
  const Tensor bi3 = hash_bucket_index(11, 3, 5);
  const Tensor many = random_indices({3, 13}, 11, 3);
  check_gradients([=](const std::vector<Var>& x) { return hash_embedding(x[0], x[1], bi3, many); },
                  {random_tensor({5, 7}, 4), random_tensor({11, 3}, 5)});
}

TEST_CASE("gradcheck: hash_head", "[hash][head][gradcheck]") {
  const Tensor bi = colliding_buckets();
  check_gradients([=](const std::vector<Var>& x) { return hash_head(x[0], x[1], x[2], bi); },
                  {random_tensor({2, 3, 5}, 6), random_tensor({4, 5}, 7), random_tensor({7, 2}, 8)});
}

TEST_CASE("gradcheck: hash_head_cross_entropy", "[hash][head][gradcheck]") {
  const Tensor bi = colliding_buckets();
  const Tensor targets = Tensor::from_data<int32_t>({2, 3}, {2, 0, 2, 6, 5, 1});
  check_gradients(
      [=](const std::vector<Var>& x) { return hash_head_cross_entropy(x[0], x[1], x[2], bi, targets); },
      {random_tensor({2, 3, 5}, 9, DType::f64, -2, 2), random_tensor({4, 5}, 10), random_tensor({7, 2}, 11)});
  // More rows than one 16-row chunk, a partial last chunk and three hashes.
  const Tensor bi3 = hash_bucket_index(13, 3, 6);
  const Tensor many = random_indices({19}, 13, 12);
  check_gradients(
      [=](const std::vector<Var>& x) { return hash_head_cross_entropy(x[0], x[1], x[2], bi3, many); },
      {random_tensor({19, 4}, 13, DType::f64, -2, 2), random_tensor({6, 4}, 14), random_tensor({13, 3}, 15)});
}

TEST_CASE("hash_head_cross_entropy equals cross_entropy(hash_head(...))", "[hash][head]") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{64}}) {
      DYNAMIC_SECTION(dtype_name(dt) << " N=" << n) {
        const HeadProblem p = head_problem(n, 301, 23, 24, 3, 20 + static_cast<uint64_t>(n), dt);
        Var z1(p.z, true), t1(p.table, true), i1(p.importance, true);
        Var fused = hash_head_cross_entropy(z1, t1, i1, p.bucket_index, p.targets);
        scale(fused, 1.7).backward();
        Var z2(p.z, true), t2(p.table, true), i2(p.importance, true);
        Var plain = cross_entropy(hash_head(z2, t2, i2, p.bucket_index), p.targets);
        scale(plain, 1.7).backward();
        const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
        CHECK(std::abs(fused.value().item() - plain.value().item()) <= tol * std::abs(plain.value().item()));
        check_close(z1.grad(), z2.grad(), tol * 10, "dz");
        check_close(t1.grad(), t2.grad(), tol * 10, "dtable");
        check_close(i1.grad(), i2.grad(), tol * 10, "dimportance");
      }
    }
  }
}

TEST_CASE("hash kernels: fast float kernels match the naive oracle on odd shapes", "[hash][kernels]") {
  // Several 16-row chunks and more than one 256-row group (partial last ones), several
  // 256-token blocks (odd tail), and V*h = 2406 or 3609 not a multiple of 16. h = 2,
  // the default, runs kernels compiled for it; any other h the general ones.
  const int64_t hashes = GENERATE(2, 3);
  const HashDims d{.vocab = 1203, .hashes = hashes, .buckets = 29, .dim = 37};
  const int64_t n = 300;
  const HeadProblem p64 = head_problem(n, d.vocab, d.buckets, d.dim, d.hashes, 40, DType::f64);
  const Tensor z = p64.z.to(DType::f32), table = p64.table.to(DType::f32),
               imp = p64.importance.to(DType::f32);
  const int32_t* bi = p64.bucket_index.data<int32_t>();
  const int32_t* tg = p64.targets.data<int32_t>();
  const Tensor dout64 = random_tensor({n, d.dim}, 41);
  const Tensor dlogits64 = random_tensor({n, d.vocab}, 42);
  const Tensor dout = dout64.to(DType::f32), dlogits = dlogits64.to(DType::f32);
  auto zeros_like = [](const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); };

  SECTION("embedding") {
    // targets double as the token ids.
    Tensor out = Tensor::empty({n, d.dim}), out64 = Tensor::empty({n, d.dim}, DType::f64);
    hash_embedding_forward(out.data<float>(), table.data<float>(), imp.data<float>(), bi, tg, n, d);
    hash_embedding_forward_naive(out64.data<double>(), p64.table.data<double>(),
                                 p64.importance.data<double>(), bi, tg, n, d);
    check_close(out, out64, 1e-6, "out");
    Tensor dt = Tensor::full(table.shape(), 0.5);
    Tensor dt64 = Tensor::full(table.shape(), 0.5, DType::f64);
    hash_embedding_backward_table(dt.data<float>(), dout.data<float>(), imp.data<float>(), bi, tg, n, d);
    hash_embedding_backward_table_naive(dt64.data<double>(), dout64.data<double>(),
                                        p64.importance.data<double>(), bi, tg, n, d);
    check_close(dt, dt64, 1e-6, "dtable");
    Tensor di = zeros_like(imp), di64 = zeros_like(p64.importance);
    hash_embedding_backward_importance(di.data<float>(), dout.data<float>(), table.data<float>(), bi, tg, n,
                                       d);
    hash_embedding_backward_importance_naive(di64.data<double>(), dout64.data<double>(),
                                             p64.table.data<double>(), bi, tg, n, d);
    check_close(di, di64, 1e-6, "dimportance");
  }
  SECTION("head") {
    Tensor logits = Tensor::empty({n, d.vocab}), scores = Tensor::empty({n, d.buckets});
    Tensor logits64 = Tensor::empty({n, d.vocab}, DType::f64);
    Tensor scores64 = Tensor::empty({n, d.buckets}, DType::f64);
    hash_head_forward(logits.data<float>(), scores.data<float>(), z.data<float>(), table.data<float>(),
                      imp.data<float>(), bi, n, d);
    hash_head_forward_naive(logits64.data<double>(), scores64.data<double>(), p64.z.data<double>(),
                            p64.table.data<double>(), p64.importance.data<double>(), bi, n, d);
    check_close(scores, scores64, 1e-6, "scores");
    check_close(logits, logits64, 1e-6, "logits");
    Tensor dz = zeros_like(z), dt = zeros_like(table), di = zeros_like(imp);
    Tensor dz64 = zeros_like(p64.z), dt64 = zeros_like(p64.table);
    Tensor di64 = zeros_like(p64.importance);
    hash_head_backward(dz.data<float>(), dt.data<float>(), di.data<float>(), dlogits.data<float>(),
                       scores.data<float>(), z.data<float>(), table.data<float>(), imp.data<float>(), bi, n,
                       d);
    hash_head_backward_naive(dz64.data<double>(), dt64.data<double>(), di64.data<double>(),
                             dlogits64.data<double>(), scores64.data<double>(), p64.z.data<double>(),
                             p64.table.data<double>(), p64.importance.data<double>(), bi, n, d);
    check_close(dz, dz64, 1e-5, "dz");
    check_close(dt, dt64, 1e-5, "dtable");
    check_close(di, di64, 1e-5, "dimportance");
  }
  SECTION("fused cross-entropy") {
    Tensor lse = Tensor::empty({n}), scores = Tensor::empty({n, d.buckets});
    Tensor lse64 = Tensor::empty({n}, DType::f64);
    const double loss =
        hash_head_cross_entropy_forward(lse.data<float>(), scores.data<float>(), z.data<float>(),
                                        table.data<float>(), imp.data<float>(), bi, tg, n, d);
    const double loss64 = hash_head_cross_entropy_forward_naive(lse64.data<double>(), p64.z.data<double>(),
                                                                p64.table.data<double>(),
                                                                p64.importance.data<double>(), bi, tg, n, d);
    CHECK(std::abs(loss - loss64) <= 1e-6 * std::abs(loss64));
    check_close(lse, lse64, 1e-6, "lse");
    Tensor dz = zeros_like(z), dt = zeros_like(table), di = zeros_like(imp);
    Tensor dz64 = zeros_like(p64.z), dt64 = zeros_like(p64.table);
    Tensor di64 = zeros_like(p64.importance);
    hash_head_cross_entropy_backward(dz.data<float>(), dt.data<float>(), di.data<float>(), 2.5f,
                                     lse.data<float>(), scores.data<float>(), z.data<float>(),
                                     table.data<float>(), imp.data<float>(), bi, tg, n, d);
    hash_head_cross_entropy_backward_naive(
        dz64.data<double>(), dt64.data<double>(), di64.data<double>(), 2.5, lse64.data<double>(),
        p64.z.data<double>(), p64.table.data<double>(), p64.importance.data<double>(), bi, tg, n, d);
    check_close(dz, dz64, 1e-5, "dz");
    check_close(dt, dt64, 1e-5, "dtable");
    check_close(di, di64, 1e-5, "dimportance");
    // A gradient that is not wanted is skipped, and the others do not change.
    Tensor di_only = zeros_like(imp);
    hash_head_cross_entropy_backward(nullptr, nullptr, di_only.data<float>(), 2.5f, lse.data<float>(),
                                     scores.data<float>(), z.data<float>(), table.data<float>(),
                                     imp.data<float>(), bi, tg, n, d);
    CHECK(bitwise_equal(di_only, di));
  }
}

TEST_CASE("a confidently right row's cross-entropy is never below zero", "[hash][head][kernels]") {
  // Two tokens, one bucket each, the target's logit far above the other's: the
  // logsumexp, summed in base 2 and rounded to float, lands within an ulp of the
  // target's logit and below it for some of these magnitudes (about a third).
  const HashDims d{.vocab = 2, .hashes = 1, .buckets = 2, .dim = 1};
  const std::vector<int32_t> bucket_index = {0, 1};
  const std::vector<float> importance = {1.0f, 1.0f};
  const int64_t n = 400;
  std::vector<float> scores(static_cast<size_t>(n * 2));
  for (int64_t r = 0; r < n; ++r) {
    scores[static_cast<size_t>(2 * r)] = 20.0f + 0.25f * static_cast<float>(r);
    scores[static_cast<size_t>(2 * r + 1)] = -scores[static_cast<size_t>(2 * r)];
  }
  const std::vector<int32_t> targets(static_cast<size_t>(n), 0);
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    INFO(kernel_level_name(level));
    ScopedKernelLevel scoped(level);
    std::vector<double> loss(static_cast<size_t>(n));
    hash_head_row_losses(loss.data(), scores.data(), importance.data(), bucket_index.data(), targets.data(),
                         n, d);
    CHECK(*std::min_element(loss.begin(), loss.end()) == 0.0);
    CHECK(*std::max_element(loss.begin(), loss.end()) < 1e-5);
    // A NaN score stays a NaN loss (a diverged model must not read as a perfect one).
    std::vector<float> broken = scores;
    broken[0] = NAN;
    hash_head_row_losses(loss.data(), broken.data(), importance.data(), bucket_index.data(), targets.data(),
                         n, d);
    CHECK(std::isnan(loss[0]));
  }
}

TEST_CASE("hash_head_gather: logits from given scores, over several token blocks", "[hash][head][kernels]") {
  // The inference runtime's path: scores computed elsewhere, one row (decode),
  // three, and groups of 16 rows (gathered a row per lane) with rows left over;
  // 5,000 tokens end in a partial block of 16, 9,000 take more than one task a
  // group, 7 fewer than a block. Every logit is w0 s0 followed by fused
  // multiply-adds in hash order, to the bit, whichever path it took.
  for (const auto& [vocab, h] : {std::pair<int64_t, int64_t>{5000, 3}, {5000, 2}, {9000, 2}, {7, 1}}) {
    const HashDims d{.vocab = vocab, .hashes = h, .buckets = 41, .dim = 1};
    const Tensor imp = random_tensor({d.vocab, d.hashes}, 60, DType::f32);
    std::vector<int32_t> bi(static_cast<size_t>(d.vocab * d.hashes));
    for (size_t i = 0; i < bi.size(); ++i) bi[i] = static_cast<int32_t>((i * 7919) % d.buckets);
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{37}}) {
      INFO("vocab " << vocab << ", h " << h << ", rows " << n);
      const Tensor s = random_tensor({n, d.buckets}, 61, DType::f32);
      Tensor logits = Tensor::full({n, d.vocab}, 99.0f);
      hash_head_gather(logits.data<float>(), s.data<float>(), imp.data<float>(), bi.data(), n, d);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t t = 0; t < d.vocab; ++t) {
          const float* w = imp.data<float>() + t * h;
          const float* sr = s.data<float>() + r * d.buckets;
          float want = w[0] * sr[bi[t * h]];
          for (int64_t j = 1; j < h; ++j) want = std::fma(w[j], sr[bi[t * h + j]], want);
          double exact = 0;
          for (int64_t j = 0; j < h; ++j) exact += static_cast<double>(w[j]) * sr[bi[t * h + j]];
          const float got = logits.data<float>()[r * d.vocab + t];
          REQUIRE(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
          REQUIRE(std::abs(got - exact) < 1e-5);
        }
    }
  }
}

TEST_CASE("hash ops give the same bits with 1 and 2 threads", "[hash][determinism]") {
  test::ThreadCountGuard guard;
  const HeadProblem p = head_problem(300, 1000, 97, 64, 2, 50, DType::f32);
  const Tensor tokens = random_indices({300}, 1000, 55);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var z(p.z, true), table(p.table, true), imp(p.importance, true);
    Var x = add(z, hash_embedding(table, imp, p.bucket_index, tokens));
    Var loss = add(hash_head_cross_entropy(x, table, imp, p.bucket_index, p.targets),
                   scale(mean(hash_head(x, table, imp, p.bucket_index)), 0.3));
    loss.backward();
    return std::vector<Tensor>{loss.value(), z.grad(), table.grad(), imp.grad()};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("output " << i);
    CHECK(bitwise_equal(one[i], two[i]));
  }
}

TEST_CASE("hash ops name a bad token, bucket or target", "[hash][errors]") {
  const Var table(random_tensor({4, 3}, 60, DType::f32));
  const Var imp(random_tensor({7, 2}, 61, DType::f32));
  const Tensor bi = colliding_buckets();
  const Var z(random_tensor({3, 3}, 62, DType::f32));
  CHECK_THROWS_WITH(hash_embedding(table, imp, bi, Tensor::from_data<int32_t>({3}, {1, 7, 0})),
                    Catch::Contains("token 7 at position 1") && Catch::Contains("[0, 7)"));
  CHECK_THROWS_WITH(hash_embedding(table, imp, bi, Tensor::from_data<int32_t>({2}, {-1, 0})),
                    Catch::Contains("token -1 at position 0"));
  Tensor bad = bi.clone();
  bad.data<int32_t>()[2 * 5 + 1] = 4;
  CHECK_THROWS_WITH(hash_embedding(table, imp, bad, Tensor::from_data<int32_t>({1}, {0})),
                    Catch::Contains("bucket_index[5, 1] = 4") && Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(hash_head(z, table, imp, bad), Catch::Contains("bucket_index[5, 1] = 4"));
  CHECK_THROWS_WITH(hash_head_cross_entropy(z, table, imp, bi, Tensor::from_data<int32_t>({3}, {0, 2, 9})),
                    Catch::Contains("target 9 at position 2"));
  CHECK_THROWS_WITH(hash_head_cross_entropy(z, table, imp, bi, Tensor::from_data<int32_t>({2}, {0, 2})),
                    Catch::Contains("does not match targets"));
  CHECK_THROWS_WITH(hash_head(Var(random_tensor({3, 5}, 63, DType::f32)), table, imp, bi),
                    Catch::Contains("table's width 3"));
  CHECK_THROWS_WITH(
      hash_embedding(table, imp, Tensor::zeros({7, 3}, DType::i32), Tensor::from_data<int32_t>({1}, {0})),
      Catch::Contains("bucket_index must be int32"));
}
