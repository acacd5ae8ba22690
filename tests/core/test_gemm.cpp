#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/gemm.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "under_sanitizer.h"

using shamn::Trans;

namespace {

const Trans kTrans[] = {Trans::no, Trans::yes};

// Restores "all cores" even when a REQUIRE inside the test throws.
struct ThreadCountGuard {
  ~ThreadCountGuard() { shamn::set_num_threads(0); }
};

template <class T>
struct Problem {
  Trans ta, tb;
  int64_t M, N, K;
  int64_t lda, ldb, ldc;
  T alpha, beta;
  std::vector<T> a, b, c0;

  // pad > 0 makes every leading dimension larger than the minimum, so row strides
  // differ from row lengths.
  Problem(Trans ta_, Trans tb_, int64_t M_, int64_t N_, int64_t K_, T alpha_, T beta_, int64_t pad,
          uint32_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
    const int64_t a_rows = ta == Trans::yes ? K : M, a_cols = ta == Trans::yes ? M : K;
    const int64_t b_rows = tb == Trans::yes ? N : K, b_cols = tb == Trans::yes ? K : N;
    lda = a_cols + pad;
    ldb = b_cols + pad;
    ldc = N + pad;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    a.resize(static_cast<size_t>(a_rows * lda));
    b.resize(static_cast<size_t>(b_rows * ldb));
    c0.resize(static_cast<size_t>(M * ldc));
    for (T& x : a) x = static_cast<T>(dist(rng));
    for (T& x : b) x = static_cast<T>(dist(rng));
    for (T& x : c0) x = static_cast<T>(dist(rng));
  }

  T opa(int64_t i, int64_t k) const { return ta == Trans::yes ? a[k * lda + i] : a[i * lda + k]; }
  T opb(int64_t k, int64_t j) const { return tb == Trans::yes ? b[j * ldb + k] : b[k * ldb + j]; }

  std::vector<T> run_fast(const std::vector<T>& c_init) const {
    std::vector<T> c = c_init;
    shamn::gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }
  std::vector<T> run_naive() const {
    std::vector<T> c = c0;
    shamn::gemm_naive<T>(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }

  std::string describe() const {
    std::ostringstream out;
    out << (ta == Trans::yes ? "T" : "N") << (tb == Trans::yes ? "T" : "N") << " M=" << M << " N=" << N
        << " K=" << K << " lda=" << lda << " ldb=" << ldb << " ldc=" << ldc << " alpha=" << alpha
        << " beta=" << beta;
    return out.str();
  }
};

// Rounding error of a length-K dot product is bounded by a multiple of
// sum_k |a_ik||b_kj| (not of the result, which may cancel to ~0).
template <class T>
constexpr double kRelTol = std::is_same_v<T, float> ? 1e-5 : 1e-12;

// Checks every element of `got` (and that padding columns were not touched) against the
// oracle. Returns the number of mismatches; reports the first few.
template <class T>
int64_t compare(const Problem<T>& p, const std::vector<T>& got, const std::vector<T>& want,
                const std::vector<T>& c_init) {
  int64_t bad = 0;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * p.ldc + j);
      if (j >= p.N) {  // padding between rows must be left alone
        const bool same = std::memcmp(&got[idx], &c_init[idx], sizeof(T)) == 0;
        if (!same && ++bad <= 5) FAIL_CHECK(p.describe() << ": wrote padding at " << i << "," << j);
        continue;
      }
      double mag = 0.0;
      for (int64_t k = 0; k < p.K; ++k)
        mag += std::abs(static_cast<double>(p.opa(i, k)) * static_cast<double>(p.opb(k, j)));
      mag *= std::abs(static_cast<double>(p.alpha));
      if (p.beta != T(0)) mag += std::abs(static_cast<double>(p.beta) * c_init[idx]);
      const double tol = kRelTol<T> * mag + 1e-30;
      const double diff = std::abs(static_cast<double>(got[idx]) - static_cast<double>(want[idx]));
      if (!(diff <= tol) && ++bad <= 5) {
        FAIL_CHECK(p.describe() << ": C[" << i << "," << j << "] = " << got[idx] << ", expected " << want[idx]
                                << " (tol " << tol << ")");
      }
    }
  }
  return bad;
}

// compare against the naive oracle, computed here; 0 without computing it under
// ThreadSanitizer (tests/under_sanitizer.h), where these tests check their threads.
template <class T>
int64_t naive_mismatches(const Problem<T>& p, const std::vector<T>& got, const std::vector<T>& c_init) {
  if (shamn::test::kUnderThreadSanitizer) return 0;
  return compare(p, got, p.run_naive(), c_init);
}

template <class T>
void check_problem(const Problem<T>& p) {
  const std::vector<T> got = p.run_fast(p.c0);
  CHECK(naive_mismatches(p, got, p.c0) == 0);
}

const int64_t kOddSizes[] = {1, 2, 7, 17, 31, 33, 65, 127, 129};

template <class T>
void sweep_odd_shapes() {
  const T betas[] = {T(0), T(1), T(0.5)};
  uint32_t seed = 1;
  int combo = 0;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (int64_t M : kOddSizes)
        for (int64_t N : kOddSizes)
          for (int64_t K : kOddSizes) {
            // Rotate beta and padding through the shapes so every combination of
            // transposes meets each beta and both tight and loose leading dimensions.
            const T beta = betas[combo % 3];
            const int64_t pad = combo % 2 == 0 ? 3 : 0;
            ++combo;
            Problem<T> p(ta, tb, M, N, K, T(-1.25), beta, pad, seed++);
            check_problem(p);
          }
}

}  // namespace

TEST_CASE("gemm float matches the naive oracle on odd shapes", "[gemm]") { sweep_odd_shapes<float>(); }

TEST_CASE("gemm double matches the naive oracle on odd shapes", "[gemm]") { sweep_odd_shapes<double>(); }

TEST_CASE("gemm float matches the oracle on larger shapes (several K, N and M blocks)", "[gemm]") {
  struct Dims {
    int64_t M, N, K;
  };
  // 300x257x513 crosses K blocks; N=1100 crosses N blocks; M=1000 crosses M blocks;
  // 3x1100 is a short-and-wide case that splits over columns.
  const Dims dims[] = {{300, 257, 513}, {33, 1100, 300}, {1000, 65, 31}, {3, 1100, 200}};
  uint32_t seed = 1000;
  for (const Dims& d : dims)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          Problem<float> p(ta, tb, d.M, d.N, d.K, 0.75f, beta, 5, seed++);
          check_problem(p);
        }
}

TEST_CASE("gemm double matches the oracle on a larger shape", "[gemm]") {
  uint32_t seed = 2000;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (double beta : {0.0, 1.0, 0.5}) {
        Problem<double> p(ta, tb, 300, 257, 513, 0.75, beta, 5, seed++);
        check_problem(p);
      }
}

TEMPLATE_TEST_CASE("gemm with beta == 0 ignores NaN in C", "[gemm]", float, double) {
  using T = TestType;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  uint32_t seed = 3000;
  struct Dims {
    int64_t M, N, K;
  };
  // One row (unpacked path), small and larger packed shapes, and K = 600, which spans
  // two K blocks (only the first may ignore C).
  const Dims dims[] = {{1, 9, 8}, {7, 9, 8}, {65, 67, 66}, {129, 131, 600}};
  for (const Dims& d : dims)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans) {
        Problem<T> p(ta, tb, d.M, d.N, d.K, T(2), T(0), 1, seed++);
        std::vector<T> c_nan(p.c0.size(), nan);
        const std::vector<T> got = p.run_fast(c_nan);
        CHECK(naive_mismatches(p, got, c_nan) == 0);
      }
}

TEMPLATE_TEST_CASE("gemm degenerate sizes", "[gemm]", float, double) {
  using T = TestType;
  std::vector<T> c = {T(1), T(2), T(3), T(4), T(5), T(6)};
  const T a[1] = {T(7)}, b[1] = {T(9)};
  SECTION("K == 0 scales C by beta") {
    shamn::gemm(Trans::no, Trans::no, 2, 3, 0, T(1), a, 0, b, 3, T(0.5), c.data(), 3);
    CHECK(c == std::vector<T>{T(0.5), T(1), T(1.5), T(2), T(2.5), T(3)});
  }
  SECTION("K == 0 with beta == 0 clears C, NaN included") {
    c[4] = std::numeric_limits<T>::quiet_NaN();
    shamn::gemm(Trans::no, Trans::no, 2, 3, 0, T(1), a, 0, b, 3, T(0), c.data(), 3);
    CHECK(c == std::vector<T>(6, T(0)));
  }
  SECTION("M == 0 or N == 0 is a no-op") {
    shamn::gemm(Trans::no, Trans::no, 0, 3, 1, T(1), a, 1, b, 3, T(0), c.data(), 3);
    shamn::gemm(Trans::no, Trans::no, 2, 0, 1, T(1), a, 1, b, 0, T(0), c.data(), 3);
    CHECK(c == std::vector<T>{T(1), T(2), T(3), T(4), T(5), T(6)});
  }
}

TEMPLATE_TEST_CASE("gemm rejects bad arguments", "[gemm]", float, double) {
  using T = TestType;
  std::vector<T> a(64, T(1)), b(64, T(1)), c(64, T(0));
  CHECK_THROWS_AS(
      shamn::gemm(Trans::no, Trans::no, -1, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2),
      shamn::Error);
  CHECK_THROWS_AS(
      shamn::gemm(Trans::no, Trans::no, 2, 2, -3, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2),
      shamn::Error);
  // A is [M,K] = [4,3]: lda must be >= 3; transposed it is [K,M] = [3,4]: lda >= 4.
  CHECK_THROWS_AS(
      shamn::gemm(Trans::no, Trans::no, 4, 2, 3, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2),
      shamn::Error);
  CHECK_THROWS_AS(
      shamn::gemm(Trans::yes, Trans::no, 4, 2, 3, T(1), a.data(), 3, b.data(), 2, T(0), c.data(), 2),
      shamn::Error);
  // B is [K,N] = [3,2]: ldb >= 2; transposed [N,K] = [2,3]: ldb >= 3.
  CHECK_THROWS_AS(
      shamn::gemm(Trans::no, Trans::yes, 4, 2, 3, T(1), a.data(), 3, b.data(), 2, T(0), c.data(), 2),
      shamn::Error);
  CHECK_THROWS_AS(
      shamn::gemm(Trans::no, Trans::no, 4, 2, 3, T(1), a.data(), 3, b.data(), 2, T(0), c.data(), 1),
      shamn::Error);
  CHECK_NOTHROW(
      shamn::gemm(Trans::yes, Trans::yes, 4, 2, 3, T(1), a.data(), 4, b.data(), 3, T(0), c.data(), 2));
}

TEST_CASE("gemm float is bit-identical with 1 and 2 threads", "[gemm][threads]") {
  ThreadCountGuard guard;
  struct Dims {
    int64_t M, N, K;
  };
  // Large enough to be split across threads in M (and in N for the short one), with
  // several K blocks.
  const Dims dims[] = {{512, 512, 512}, {300, 1100, 513}, {20, 2048, 600}};
  uint32_t seed = 4000;
  for (const Dims& d : dims)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans) {
        Problem<float> p(ta, tb, d.M, d.N, d.K, 0.5f, 0.25f, 1, seed++);
        shamn::set_num_threads(1);
        const std::vector<float> one = p.run_fast(p.c0);
        shamn::set_num_threads(2);
        const std::vector<float> two = p.run_fast(p.c0);
        INFO(p.describe());
        CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
      }
}

TEST_CASE("gemm float: a long K split over threads gives the bits of the serial K loop", "[gemm][threads]") {
  // C with few tiles against K of several KC blocks (a weight gradient's shape): with
  // many threads the K blocks are summed in parallel and added in order, beta with
  // the first; with one thread they are walked in order. NaN in C checks beta == 0.
  ThreadCountGuard guard;
  uint32_t seed = 4500;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (const auto& [alpha, beta] :
           {std::pair{1.0f, 1.0f}, {0.5f, 0.0f}, {1.0f, 0.25f}, {0.75f, 1.0f}, {0.3f, 0.0f}}) {
        Problem<float> p(ta, tb, 16, 100, 1500, alpha, beta, 1, seed++);
        if (beta == 0.0f) std::fill(p.c0.begin(), p.c0.end(), std::numeric_limits<float>::quiet_NaN());
        shamn::set_num_threads(1);
        const std::vector<float> one = p.run_fast(p.c0);
        shamn::set_num_threads(8);
        const std::vector<float> eight = p.run_fast(p.c0);
        INFO(p.describe());
        CHECK(std::memcmp(one.data(), eight.data(), one.size() * sizeof(float)) == 0);
        CHECK(naive_mismatches(p, eight, p.c0) == 0);
      }
}

TEST_CASE("gemm with few columns of C gives the bits of the direct product", "[gemm][threads]") {
  // C [M, N <= 20] runs as C^T = op(B)^T op(A)^T (core/gemm.cpp); with that path
  // off the same call runs the packed product directly. Shapes cover one and
  // several K blocks, a row count that is not a multiple of any tile, padding,
  // every beta rule (NaN in C for beta == 0) and both precisions, on 1 and 2 threads.
  ThreadCountGuard guard;
  struct Restore {
    ~Restore() { shamn::set_gemm_few_columns(true); }
  } restore;
  struct Dims {
    int64_t M, N, K;
  };
  uint32_t seed = 7000;
  for (const Dims& d :
       {Dims{4096, 4, 512}, Dims{4096, 20, 512}, Dims{300, 16, 513}, Dims{257, 1, 40}, Dims{1000, 11, 1300}})
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.25f}})
          for (const auto precision : {shamn::ProductPrecision::f32, shamn::ProductPrecision::bf16})
            for (int threads : {1, 2}) {
              Problem<float> p(ta, tb, d.M, d.N, d.K, alpha, beta, d.N % 2, seed++);
              if (beta == 0.0f) std::fill(p.c0.begin(), p.c0.end(), std::numeric_limits<float>::quiet_NaN());
              shamn::set_num_threads(threads);
              const auto run = [&](bool few_columns) {
                shamn::set_gemm_few_columns(few_columns);
                std::vector<float> c = p.c0;
                shamn::gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                            c.data(), p.ldc, precision);
                return c;
              };
              const std::vector<float> direct = run(false), few = run(true);
              INFO(p.describe() << (precision == shamn::ProductPrecision::bf16 ? " bf16" : " f32")
                                << " threads=" << threads);
              CHECK(std::memcmp(direct.data(), few.data(), direct.size() * sizeof(float)) == 0);
              if (precision == shamn::ProductPrecision::f32) CHECK(naive_mismatches(p, few, p.c0) == 0);
            }
}

TEST_CASE("gemm float: A panels packed once for several column groups give the bits of one thread",
          "[gemm][threads]") {
  // With A's row panels not a multiple of the threads, B's columns are split into
  // groups too; a packed A (stored [K, M], or bf16) is then packed once per K block
  // and shared by the groups. 3 and 16 threads make groups at every MR (4, 6, 8);
  // K <= 512 and a C over 1 MiB keep the product off the split-K path.
  ThreadCountGuard guard;
  struct Dims {
    int64_t M, N, K;
  };
  uint32_t seed = 8000;
  for (const Dims& d : {Dims{75, 200, 300}, Dims{602, 520, 1100}})
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 0.25f}})
          for (const auto precision : {shamn::ProductPrecision::f32, shamn::ProductPrecision::bf16}) {
            Problem<float> p(ta, tb, d.M, d.N, d.K, alpha, beta, 1, seed++);
            if (beta == 0.0f) std::fill(p.c0.begin(), p.c0.end(), std::numeric_limits<float>::quiet_NaN());
            const auto run = [&](int threads) {
              shamn::set_num_threads(threads);
              std::vector<float> c = p.c0;
              shamn::gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                          c.data(), p.ldc, precision);
              return c;
            };
            const std::vector<float> one = run(1);
            INFO(p.describe() << (precision == shamn::ProductPrecision::bf16 ? " bf16" : " f32"));
            for (int threads : {3, 16}) {
              const std::vector<float> many = run(threads);
              INFO("threads=" << threads);
              CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
            }
            if (precision == shamn::ProductPrecision::f32) CHECK(naive_mismatches(p, one, p.c0) == 0);
          }
}

TEST_CASE("gemm float reads a row-major A in place with the bits of the packed transposed A",
          "[gemm][threads]") {
  // op(A) = A (K >= 64) is read row by row in place; op(A) = (A^T)^T is packed
  // first. Both give each C element the same chain of fused multiply-adds, so the
  // bits agree, and equal the first level's at every other: row counts that leave
  // edge tiles, padded rows, several K blocks (513, 1300), both B layouts, every
  // beta rule (C + alpha * acc among them, once fused in some kernels only).
  ThreadCountGuard guard;
  struct RestoreLevel {
    shamn::KernelLevel level = shamn::kernel_level();
    ~RestoreLevel() { shamn::set_kernel_level(level); }
  } restore;
  struct Dims {
    int64_t M, N, K;
  };
  std::vector<std::vector<float>> first_level;
  for (int level = 0; level < shamn::kKernelLevels; ++level) {
    if (!shamn::kernel_level_supported(static_cast<shamn::KernelLevel>(level))) continue;
    shamn::set_kernel_level(static_cast<shamn::KernelLevel>(level));
    const bool first = first_level.empty();
    size_t index = 0;
    uint32_t seed = 7500;
    for (const Dims& d : {Dims{37, 70, 64}, Dims{301, 257, 513}, Dims{45, 100, 1300}})
      for (Trans tb : kTrans)
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.75f, 1.0f}, {1.0f, 0.25f}})
          for (int threads : {1, 2}) {
            shamn::set_num_threads(threads);
            Problem<float> rows(Trans::no, tb, d.M, d.N, d.K, alpha, beta, 3, seed++);
            if (beta == 0.0f)
              std::fill(rows.c0.begin(), rows.c0.end(), std::numeric_limits<float>::quiet_NaN());
            const int64_t lda_t = d.M + 1;  // A^T [K, M], padded too
            std::vector<float> a_t(static_cast<size_t>(d.K * lda_t), 0.0f);
            for (int64_t i = 0; i < d.M; ++i)
              for (int64_t k = 0; k < d.K; ++k) a_t[k * lda_t + i] = rows.a[i * rows.lda + k];
            std::vector<float> packed = rows.c0;
            shamn::gemm(Trans::yes, tb, d.M, d.N, d.K, alpha, a_t.data(), lda_t, rows.b.data(), rows.ldb,
                        beta, packed.data(), rows.ldc);
            const std::vector<float> in_place = rows.run_fast(rows.c0);
            INFO(rows.describe() << " level=" << shamn::kernel_level_name(shamn::kernel_level())
                                 << " threads=" << threads);
            CHECK(std::memcmp(in_place.data(), packed.data(), in_place.size() * sizeof(float)) == 0);
            if (first) {
              CHECK(naive_mismatches(rows, in_place, rows.c0) == 0);
              first_level.push_back(in_place);
            } else {
              CHECK(std::memcmp(in_place.data(), first_level[index].data(),
                                in_place.size() * sizeof(float)) == 0);
            }
            ++index;
          }
  }
}

TEST_CASE("gemm double is bit-identical with 1 and 2 threads", "[gemm][threads]") {
  ThreadCountGuard guard;
  Problem<double> p(Trans::yes, Trans::no, 200, 150, 170, 0.5, 0.25, 1, 5000);
  shamn::set_num_threads(1);
  const std::vector<double> one = p.run_fast(p.c0);
  shamn::set_num_threads(2);
  const std::vector<double> two = p.run_fast(p.c0);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(double)) == 0);
}

TEST_CASE("gemm float gives the same bits when called from inside parallel tasks", "[gemm][threads]") {
  // Concurrent calls, each with its own parallel loops nested inside an outer task:
  // every call needs private packing buffers to match the sequential results.
  std::vector<Problem<float>> problems;
  for (uint32_t t = 0; t < 24; ++t)
    problems.emplace_back(t % 2 ? Trans::yes : Trans::no, t % 3 ? Trans::no : Trans::yes, 160, 130 + t, 200,
                          1.0f, 0.0f, 0, 6000 + t);
  std::vector<std::vector<float>> sequential, nested(problems.size());
  for (const auto& p : problems) sequential.push_back(p.run_fast(p.c0));
  shamn::parallel_for(0, static_cast<int64_t>(problems.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const auto& p = problems[static_cast<size_t>(t)];
      nested[static_cast<size_t>(t)] = p.run_fast(p.c0);
    }
  });
  for (size_t t = 0; t < problems.size(); ++t) {
    INFO(problems[t].describe());
    CHECK(std::memcmp(sequential[t].data(), nested[t].data(), sequential[t].size() * sizeof(float)) == 0);
  }
}
