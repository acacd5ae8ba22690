// The bf16 products (block-sparse and the packed GEMM) against an obvious scalar oracle of
// their arithmetic: operands rounded to bf16, each output one chain of FMAs
// taking k in pairs, the higher k first (as vdpbf16ps adds a pair), over the
// blocks in order and, for grad values, over 256-token chunks added in order.
// Every kernel level, with and without vdpbf16ps, on 1 and 2 threads, must
// give the oracle's bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/gemm.h"
#include "core/kernel_level.h"
#include "core/kernels/block_sparse.h"
#include "core/machine_probe_bf16.h"
#include "core/parallel.h"
#include "core/product_precision.h"
#include "helpers.h"

using namespace shamn;

namespace {

constexpr int64_t kChunk = 256;  // grad values' token chunk (SHAMN_BSR_KC)

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// acc + sum over k < len of a(k) b(k), k in pairs (2p + 1 first, then 2p), a
// missing odd k contributing 0 x 0.
template <class A, class B>
float pair_chain(float acc, int64_t len, A a, B b) {
  for (int64_t k = 0; k < len; k += 2) {
    acc = k + 1 < len ? std::fma(a(k + 1), b(k + 1), acc) : std::fma(0.0f, 0.0f, acc);
    acc = std::fma(a(k), b(k), acc);
  }
  return acc;
}

struct Problem {
  BlockSparseDims d;
  int64_t n;
  std::vector<int32_t> ci;
  std::vector<float> x, w, bias, dy;
};

Problem make_problem(int64_t block, int64_t n) {
  Problem p;
  p.d.block = block;
  p.d.in = 4 * block;
  p.d.out = 3 * block;
  p.d.active = 2;
  p.n = n;
  p.ci = {0, 2, 1, 3, 0, 3};
  p.x = test::uniform_floats(n * p.d.in, 11);
  p.w = test::uniform_floats(p.d.value_count(), 12);
  p.bias = test::uniform_floats(p.d.out, 13);
  p.dy = test::uniform_floats(n * p.d.out, 14);
  return p;
}

std::vector<float> oracle_forward(const Problem& p) {
  const auto& d = p.d;
  const int64_t b = d.block, a = d.active;
  const std::vector<float> x = rounded(p.x), w = rounded(p.w);
  std::vector<float> y(static_cast<size_t>(p.n * d.out));
  for (int64_t t = 0; t < p.n; ++t)
    for (int64_t o = 0; o < d.out; ++o) {
      const int64_t r = o / b, i = o % b;
      float acc = p.bias[o];
      for (int64_t m = 0; m < a; ++m) {
        const int64_t c = p.ci[r * a + m];
        acc = pair_chain(
            acc, b, [&](int64_t k) { return x[t * d.in + c * b + k]; },
            [&](int64_t k) { return w[((r * a + m) * b + i) * b + k]; });
      }
      y[t * d.out + o] = acc;
    }
  return y;
}

std::vector<float> oracle_backward_input(const Problem& p, const std::vector<float>& dx0) {
  const auto& d = p.d;
  const int64_t b = d.block, a = d.active;
  const std::vector<float> g = rounded(p.dy), w = rounded(p.w);
  std::vector<float> dx = dx0;
  for (int64_t t = 0; t < p.n; ++t)
    for (int64_t col = 0; col < d.in; ++col) {
      const int64_t c = col / b, k = col % b;
      float acc = 0;
      for (int64_t r = 0; r < d.row_blocks(); ++r)  // block rows ascending
        for (int64_t m = 0; m < a; ++m)
          if (p.ci[r * a + m] == c)
            acc = pair_chain(
                acc, b, [&](int64_t i) { return g[t * d.out + r * b + i]; },
                [&](int64_t i) { return w[((r * a + m) * b + i) * b + k]; });
      dx[t * d.in + col] += acc;
    }
  return dx;
}

std::vector<float> oracle_backward_values(const Problem& p, const std::vector<float>& dv0) {
  const auto& d = p.d;
  const int64_t b = d.block, a = d.active;
  const std::vector<float> g = rounded(p.dy), x = rounded(p.x);
  std::vector<float> dv = dv0;
  for (int64_t t0 = 0; t0 < p.n; t0 += kChunk) {
    const int64_t kc = std::min(kChunk, p.n - t0);
    for (int64_t blk = 0; blk < d.row_blocks() * a; ++blk) {
      const int64_t r = blk / a, c = p.ci[blk];
      for (int64_t i = 0; i < b; ++i)
        for (int64_t k = 0; k < b; ++k) {
          const float chunk = pair_chain(
              0.0f, kc, [&](int64_t t) { return g[(t0 + t) * d.out + r * b + i]; },
              [&](int64_t t) { return x[(t0 + t) * d.in + c * b + k]; });
          float& out = dv[(blk * b + i) * b + k];
          out = out + chunk;
        }
    }
  }
  return dv;
}

}  // namespace

TEST_CASE("block-sparse bf16 products equal the pair-chain oracle at every level, native or emulated",
          "[kernels][block_sparse][bf16]") {
  test::ThreadCountGuard guard;
  for (int64_t block : {16, 32})
    for (int64_t n : {9, 301}) {  // 301: two grad-values chunks, the last of odd length
      const Problem p = make_problem(block, n);
      const std::vector<float> dx0 = test::uniform_floats(n * p.d.in, 15),
                               dv0 = test::uniform_floats(p.d.value_count(), 16);
      const std::vector<float> want_y = oracle_forward(p), want_dx = oracle_backward_input(p, dx0),
                               want_dv = oracle_backward_values(p, dv0);
      for (int level = 0; level < kKernelLevels; ++level) {
        if (!kernel_level_supported(static_cast<KernelLevel>(level))) continue;
        const ScopedKernelLevel scoped(static_cast<KernelLevel>(level));
        for (bool native : {true, false}) {
          allow_bf16_dot_native(native);
          // vdpbf16ps runs wherever it can: this test covers it on such a CPU.
          CHECK(bf16_dot_native() ==
                (native && level == static_cast<int>(KernelLevel::avx512) && bf16_dot_supported()));
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            INFO("block " << block << " n " << n << " level "
                          << kernel_level_name(static_cast<KernelLevel>(level)) << " vdpbf16ps "
                          << bf16_dot_native() << " threads " << threads);
            std::vector<float> y(want_y.size()), dx = dx0, dv = dv0;
            block_sparse_forward(y.data(), p.x.data(), p.w.data(), p.ci.data(), p.bias.data(), n, p.d,
                                 ProductPrecision::bf16);
            block_sparse_backward_input(dx.data(), p.dy.data(), p.w.data(), p.ci.data(), n, p.d,
                                        ProductPrecision::bf16);
            block_sparse_backward_values(dv.data(), p.dy.data(), p.x.data(), p.ci.data(), n, p.d,
                                         ProductPrecision::bf16);
            CHECK(test::same_bits(y, want_y));
            CHECK(test::same_bits(dx, want_dx));
            CHECK(test::same_bits(dv, want_dv));
          }
        }
      }
      allow_bf16_dot_native(true);
    }
}

TEST_CASE("block-sparse bf16 grad input with overwrite writes the oracle's chain",
          "[kernels][block_sparse][bf16]") {
  const Problem p = make_problem(32, 20);
  const std::vector<float> want = oracle_backward_input(p, std::vector<float>(p.n * p.d.in, 0.0f));
  std::vector<float> dx(want.size(), std::nanf(""));
  block_sparse_backward_input(dx.data(), p.dy.data(), p.w.data(), p.ci.data(), p.n, p.d,
                              ProductPrecision::bf16, true);
  // Adding the chain to +0 and writing it differ only for a -0 chain.
  for (size_t i = 0; i < dx.size(); ++i)
    if (want[i] == 0.0f) dx[i] = std::fabs(dx[i]);
  CHECK(test::same_bits(dx, want));
}

namespace {

constexpr int64_t kKc = 512;  // the packed GEMM's K block (core/gemm_isa.cpp)

// C = alpha op(A) op(B) + beta C with bf16 operands: per K block, a pair chain
// from zero, then as the GEMM's epilogue: alpha * chain, added to beta C (the
// first block) or to C (the others).
std::vector<float> oracle_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const std::vector<float>& A, const std::vector<float>& B, float beta,
                               std::vector<float> C) {
  const std::vector<float> a = rounded(A), b = rounded(B);
  const auto at = [&](int64_t i, int64_t k) { return ta ? a[k * M + i] : a[i * K + k]; };
  const auto bt = [&](int64_t k, int64_t j) { return tb ? b[j * K + k] : b[k * N + j]; };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float& out = C[i * N + j];
      for (int64_t k0 = 0; k0 < K; k0 += kKc) {
        const float chain = pair_chain(
            0.0f, std::min(kKc, K - k0), [&](int64_t k) { return at(i, k0 + k); },
            [&](int64_t k) { return bt(k0 + k, j); });
        const float r = alpha == 1.0f ? chain : alpha * chain;
        const float beta_k = k0 == 0 ? beta : 1.0f;
        out = beta_k == 0.0f ? r : beta_k == 1.0f ? out + r : std::fma(beta_k, out, r);
      }
    }
  return C;
}

}  // namespace

TEST_CASE("gemm bf16 products equal the pair-chain oracle at every level, native or emulated",
          "[core][gemm][bf16]") {
  test::ThreadCountGuard guard;
  struct Shape {
    int64_t M, N, K;
  };
  // 9 x 45 x 37: one K block of odd length, an edge tile; 20 x 33 x 700: two K
  // blocks (and, on 2 threads, the blocks in parallel).
  for (const Shape sh : {Shape{9, 45, 37}, Shape{20, 33, 700}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& [alpha, beta] :
             {std::pair{1.0f, 0.0f}, std::pair{0.5f, 0.25f}, std::pair{1.0f, 1.0f}}) {
          const auto [M, N, K] = sh;
          const std::vector<float> A = test::uniform_floats(M * K, 21), B = test::uniform_floats(K * N, 22),
                                   C0 = test::uniform_floats(M * N, 23);
          const std::vector<float> want = oracle_gemm(ta, tb, M, N, K, alpha, A, B, beta, C0);
          for (int level = 0; level < kKernelLevels; ++level) {
            if (!kernel_level_supported(static_cast<KernelLevel>(level))) continue;
            const ScopedKernelLevel scoped(static_cast<KernelLevel>(level));
            for (bool native : {true, false}) {
              allow_bf16_dot_native(native);
              for (int threads : {1, 2}) {
                set_num_threads(threads);
                INFO(M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " alpha " << alpha
                       << " beta " << beta << " level " << kernel_level_name(static_cast<KernelLevel>(level))
                       << " vdpbf16ps " << bf16_dot_native() << " threads " << threads);
                std::vector<float> C = C0;
                gemm(ta ? Trans::yes : Trans::no, tb ? Trans::yes : Trans::no, M, N, K, alpha, A.data(),
                     ta ? M : K, B.data(), tb ? K : N, beta, C.data(), N, ProductPrecision::bf16);
                CHECK(test::same_bits(C, want));
              }
            }
            allow_bf16_dot_native(true);
          }
        }
}
