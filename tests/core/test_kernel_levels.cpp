// Every kernel family is compiled once per SIMD level (core/isa.h). Each level
// must give bitwise the same results as the others, so a run's numbers do not
// depend on the CPU it lands on (or on SHAMN_KERNEL). Shapes include edge tiles,
// more than one K block, extreme exp arguments and every transpose case.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/gemm.h"
#include "core/kernel_level.h"
#include "core/kernels/activation.h"
#include "core/kernels/block_sparse.h"
#include "core/kernels/causal_conv.h"
#include "core/kernels/hash_embedding.h"
#include "core/kernels/hash_head.h"
#include "core/kernels/moe_routing.h"
#include "core/kernels/philox_span.h"
#include "core/rng.h"

using namespace shamn;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The first index where the bits differ, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return -1;
}

// Runs `compute` at every level this CPU has and requires the bits of the scalar
// level. The portable code contracts a * b + c to one FMA only where the baseline
// has FMA (the default build); without it, only the SIMD levels must agree.
void require_same_bits_at_every_level(const std::function<std::vector<float>()>& compute) {
  std::vector<float> reference;
  KernelLevel reference_level = KernelLevel::scalar;
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) {
      WARN("kernel level " << kernel_level_name(level) << " skipped: this CPU lacks it");
      continue;
    }
#if !defined(__FMA__)
    if (level == KernelLevel::scalar) continue;
#endif
    ScopedKernelLevel scoped(level);
    std::vector<float> got = compute();
    if (reference.empty()) {
      reference = std::move(got);
      reference_level = level;
      continue;
    }
    const int64_t at = first_difference(got, reference);
    INFO(kernel_level_name(level) << " against " << kernel_level_name(reference_level) << ": output " << at
                                  << " is " << (at >= 0 ? got[static_cast<size_t>(at)] : 0.0f) << " against "
                                  << (at >= 0 ? reference[static_cast<size_t>(at)] : 0.0f));
    REQUIRE(at == -1);
  }
}

}  // namespace

TEST_CASE("gemm gives the same bits at every kernel level", "[kernels][levels]") {
  struct Shape {
    int64_t M, N, K;
  };
  for (Shape s : {Shape{37, 45, 600}, Shape{64, 96, 128}, Shape{9, 33, 7}, Shape{130, 17, 1100}})
    for (Trans ta : {Trans::no, Trans::yes})
      for (Trans tb : {Trans::no, Trans::yes})
        for (float beta : {0.0f, 1.0f, 0.7f}) {
          const float alpha = beta == 0.7f ? 0.5f : 1.0f;
          INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << (ta == Trans::yes)
                    << " tb=" << (tb == Trans::yes) << " alpha=" << alpha << " beta=" << beta);
          const std::vector<float> A = random_floats(static_cast<size_t>(s.M * s.K), 1);
          const std::vector<float> B = random_floats(static_cast<size_t>(s.K * s.N), 2);
          const std::vector<float> C0 = random_floats(static_cast<size_t>(s.M * s.N), 3);
          require_same_bits_at_every_level([&] {
            std::vector<float> C = C0;
            gemm(ta, tb, s.M, s.N, s.K, alpha, A.data(), ta == Trans::yes ? s.M : s.K, B.data(),
                 tb == Trans::yes ? s.K : s.N, beta, C.data(), s.N);
            return C;
          });
        }
}

TEST_CASE("block-sparse kernels give the same bits at every kernel level", "[kernels][levels]") {
  for (int64_t block : {16, 32, 48}) {
    const BlockSparseDims d{.in = 6 * block, .out = 4 * block, .block = block, .active = 2};
    std::vector<int32_t> col_index;
    for (int64_t r = 0; r < d.row_blocks(); ++r) {
      col_index.push_back(static_cast<int32_t>(r % 3));
      col_index.push_back(static_cast<int32_t>(3 + r % 3));
    }
    const int64_t n = 301;  // not a multiple of any tile
    const std::vector<float> x = random_floats(static_cast<size_t>(n * d.in), 4);
    const std::vector<float> dy = random_floats(static_cast<size_t>(n * d.out), 5);
    const std::vector<float> values =
        random_floats(static_cast<size_t>(d.row_blocks() * 2 * block * block), 6);
    const std::vector<float> bias = random_floats(static_cast<size_t>(d.out), 7);
    INFO("block " << block);
    require_same_bits_at_every_level([&] {
      std::vector<float> y(static_cast<size_t>(n * d.out));
      std::vector<float> dx = random_floats(static_cast<size_t>(n * d.in), 8);
      std::vector<float> dv = random_floats(values.size(), 9);
      block_sparse_forward(y.data(), x.data(), values.data(), col_index.data(), bias.data(), n, d);
      block_sparse_backward_input(dx.data(), dy.data(), values.data(), col_index.data(), n, d);
      block_sparse_backward_values(dv.data(), dy.data(), x.data(), col_index.data(), n, d);
      // Again reading gelu of rows gathered in reverse (the packers' activation).
      std::vector<int32_t> rows(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>(n - 1 - t);
      const RowSource src{rows.data(), InputActivation::gelu};
      std::vector<float> ya(y.size());
      std::vector<float> dva = random_floats(values.size(), 9);
      block_sparse_forward(ya.data(), x.data(), values.data(), col_index.data(), bias.data(), n, d,
                           ProductPrecision::f32, src);
      block_sparse_backward_values(dva.data(), dy.data(), x.data(), col_index.data(), n, d,
                                   ProductPrecision::f32, src);
      for (const std::vector<float>* part : {&dx, &dv, &ya, &dva})
        y.insert(y.end(), part->begin(), part->end());
      return y;
    });
  }
}

TEST_CASE("activations give the same bits at every kernel level", "[kernels][levels]") {
  // Past both ends of exp's range, so the clamps, denormals and inf lanes are covered.
  std::vector<float> x = random_floats(4099, 10, -110.0f, 95.0f);
  const std::vector<float> small = random_floats(1000, 11, -4.0f, 4.0f);
  x.insert(x.end(), small.begin(), small.end());
  x.push_back(INFINITY);
  x.push_back(-INFINITY);
  const std::vector<float> dy = random_floats(x.size(), 12);
  require_same_bits_at_every_level([&] {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> out;
    for (int f = 0; f < 3; ++f) {
      std::vector<float> y(x.size()), dx(x.size(), 0.25f), in_place = dy;  // in_place: written over dy
      if (f == 0) {
        gelu_forward(y.data(), x.data(), n);
        gelu_backward(dx.data(), dy.data(), x.data(), n);
        gelu_backward(in_place.data(), in_place.data(), x.data(), n, true);
      } else if (f == 1) {
        silu_forward(y.data(), x.data(), n);
        silu_backward(dx.data(), dy.data(), x.data(), n);
        silu_backward(in_place.data(), in_place.data(), x.data(), n, true);
      } else {
        sigmoid_forward(y.data(), x.data(), n);
        sigmoid_backward(dx.data(), dy.data(), y.data(), n);
      }
      out.insert(out.end(), y.begin(), y.end());
      out.insert(out.end(), dx.begin(), dx.end());
      if (f < 2) out.insert(out.end(), in_place.begin(), in_place.end());
    }
    return out;
  });
}

TEST_CASE("the causal convolution gives the same bits at every kernel level", "[kernels][levels]") {
  // D = 61: whole vectors and a partial one at every width; K = 4 (the level's
  // kernel) and K = 3 (the generic loop); streaming from a history too.
  const int64_t B = 2, T = 9, D = 61;
  const std::vector<float> u = random_floats(static_cast<size_t>(B * T * D), 13);
  require_same_bits_at_every_level([&] {
    std::vector<float> out;
    for (const int64_t K : {4, 3}) {
      const CausalConvDims dims{B, T, D, K};
      const std::vector<float> conv = random_floats(static_cast<size_t>(D * K), 14);
      std::vector<float> c(u.size()), history = random_floats(static_cast<size_t>((K - 1) * D), 15);
      causal_conv_forward(c.data(), u.data(), conv.data(), dims);
      out.insert(out.end(), c.begin(), c.end());
      causal_conv_forward_streaming(c.data(), u.data(), history.data(), conv.data(),
                                    CausalConvDims{1, T, D, K});
      out.insert(out.end(), c.begin(), c.begin() + T * D);
    }
    return out;
  });
}

TEST_CASE("the causal convolution's one-pass backward gives the same bits at every kernel level",
          "[kernels][levels]") {
  // 64 channels: whole slices at every level's width (16, or 32 at AVX-512).
  const int64_t B = 2, T = 9, D = 64, K = 4;
  const std::vector<float> u = random_floats(static_cast<size_t>(B * T * D), 16),
                           dc = random_floats(u.size(), 17),
                           conv = random_floats(static_cast<size_t>(D * K), 18);
  require_same_bits_at_every_level([&] {
    std::vector<float> du(u.size(), 0.5f), dconv(conv.size(), 0.25f);
    causal_conv_backward(du.data(), dconv.data(), dc.data(), u.data(), conv.data(),
                         CausalConvDims{B, T, D, K});
    du.insert(du.end(), dconv.begin(), dconv.end());
    return du;
  });
}

TEST_CASE("logsumexp gives the same bits at every kernel level and the f64 value closely",
          "[kernels][levels]") {
  // Lengths around the 16- and 32-lane steps, and a vocabulary-sized row.
  const int64_t lengths[] = {1, 15, 16, 17, 31, 32, 33, 47, 32000};
  std::vector<float> x = random_floats(32000, 13, -30.0f, 20.0f);
  require_same_bits_at_every_level([&] {
    std::vector<float> out;
    for (int64_t n : lengths) out.push_back(static_cast<float>(logsumexp(x.data(), n)));
    return out;
  });
  for (int64_t n : lengths) {
    double m = x[0], s = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max<double>(m, x[i]);
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
    INFO("n = " << n);
    CHECK(logsumexp(x.data(), n) == Approx(m + std::log(s)).epsilon(1e-6));
  }
  const float inf_row[3] = {1.0f, INFINITY, 2.0f};
  CHECK(logsumexp(inf_row, 3) == INFINITY);
}

TEST_CASE("exp_forward and the router softmax give the same bits at every kernel level, near std::exp",
          "[kernels][levels]") {
  // Lengths around the 16-lane step; arguments over the whole float range of exp.
  const int64_t lengths[] = {1, 15, 16, 17, 33, 320};
  const std::vector<float> x = random_floats(320, 17, -90.0f, 88.0f);
  require_same_bits_at_every_level([&] {
    std::vector<float> out;
    for (int64_t n : lengths) {
      std::vector<float> y(static_cast<size_t>(n));
      exp_forward(y.data(), x.data(), n);
      out.insert(out.end(), y.begin(), y.end());
    }
    return out;
  });
  std::vector<float> y(x.size());
  exp_forward(y.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    CHECK(y[i] == Approx(std::exp(static_cast<double>(x[i]))).epsilon(3e-7).margin(1e-37));
  }
  // 37 tokens of a 4 x 4 router: chunks of 16 and a tail.
  const MoeShape shape{4, 4, 1, 2};
  const int64_t n = 37;
  const std::vector<float> rg = random_floats(static_cast<size_t>(n * 4), 3, -6.0f, 6.0f);
  const std::vector<float> re = random_floats(static_cast<size_t>(n * 16), 4, -6.0f, 6.0f);
  require_same_bits_at_every_level([&] {
    std::vector<float> P(static_cast<size_t>(n * 16)), pg(static_cast<size_t>(n * 4)), pe(P.size());
    router_probs_forward(P.data(), pg.data(), pe.data(), rg.data(), re.data(), n, shape);
    P.insert(P.end(), pg.begin(), pg.end());
    return P;
  });
}

TEST_CASE("the hash head gives the same bits at every kernel level", "[kernels][levels]") {
  const HashDims d{.vocab = 1000, .hashes = 2, .buckets = 97, .dim = 64};
  const int64_t n = 53;
  std::vector<int32_t> bucket_index(static_cast<size_t>(d.vocab * d.hashes));
  hash_bucket_index_fill(bucket_index.data(), d.vocab, d.hashes, d.buckets);
  // z's range 3: softmax arguments within a few units of the row maximum; 60:
  // hundreds below it, so exp2 underflows to denormals and zero in most lanes.
  const float z_range = GENERATE(3.0f, 60.0f);
  INFO("z in [-" << z_range << ", " << z_range << "]");
  const std::vector<float> z = random_floats(static_cast<size_t>(n * d.dim), 13, -z_range, z_range);
  const std::vector<float> table = random_floats(static_cast<size_t>(d.buckets * d.dim), 14);
  const std::vector<float> importance = random_floats(static_cast<size_t>(d.vocab * d.hashes), 15);
  const std::vector<float> dlogits = random_floats(static_cast<size_t>(n * d.vocab), 16);
  std::vector<int32_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37) % d.vocab);
  require_same_bits_at_every_level([&] {
    std::vector<float> logits(static_cast<size_t>(n * d.vocab)), scores(static_cast<size_t>(n * d.buckets));
    std::vector<float> dz(z.size()), dtable(table.size()), dimp(importance.size()),
        lse(static_cast<size_t>(n));
    hash_head_forward(logits.data(), scores.data(), z.data(), table.data(), importance.data(),
                      bucket_index.data(), n, d);
    hash_head_backward(dz.data(), dtable.data(), dimp.data(), dlogits.data(), scores.data(), z.data(),
                       table.data(), importance.data(), bucket_index.data(), n, d);
    const double loss =
        hash_head_cross_entropy_forward(lse.data(), scores.data(), z.data(), table.data(), importance.data(),
                                        bucket_index.data(), targets.data(), n, d);
    hash_head_cross_entropy_backward(dz.data(), dtable.data(), dimp.data(), 1.5f, lse.data(), scores.data(),
                                     z.data(), table.data(), importance.data(), bucket_index.data(),
                                     targets.data(), n, d);
    std::vector<double> row_loss(static_cast<size_t>(n));
    hash_head_row_losses(row_loss.data(), scores.data(), importance.data(), bucket_index.data(),
                         targets.data(), n, d);
    std::vector<float> out = logits;
    for (const std::vector<float>* v : {&scores, &dz, &dtable, &dimp, &lse})
      out.insert(out.end(), v->begin(), v->end());
    out.push_back(static_cast<float>(loss));
    out.push_back(static_cast<float>(loss - static_cast<float>(loss)));
    for (double l : row_loss) {
      out.push_back(static_cast<float>(l));
      out.push_back(static_cast<float>(l - static_cast<float>(l)));
    }
    return out;
  });
}

TEST_CASE("philox_span gives Philox4x32-10's words at every kernel level", "[kernels][levels][dropout]") {
  // Counters across 2^32 (their high word changes inside a span), streams and
  // seeds with both halves set.
  const uint64_t firsts[] = {0, 16, 0xFFFFFFF8ull, 0x123456789ABCull};
  const uint64_t keys[][2] = {{0, 0}, {0x9E3779B97F4A7C15ull, 3}, {7, 0xFFFFFFFFFFFFFFFFull}};
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    const ScopedKernelLevel scoped(level);
    for (uint64_t first : firsts)
      for (const auto& key : keys) {
        uint32_t words[kPhiloxSpanWords];
        philox_span(first, key[0], key[1], words);
        for (int l = 0; l < kPhiloxSpanBlocks; ++l) {
          const std::array<uint32_t, 4> expected =
              philox4x32(first + static_cast<uint64_t>(l), key[0], key[1]);
          for (int j = 0; j < 4; ++j) {
            INFO(kernel_level_name(level) << ": first " << first << ", block " << l << ", word " << j);
            REQUIRE(words[16 * j + l] == expected[static_cast<size_t>(j)]);
          }
        }
      }
  }
}
