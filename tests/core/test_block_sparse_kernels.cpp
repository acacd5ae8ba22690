// The fast block-sparse kernels against their naive twins and against the dense GEMM.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/gemm.h"
#include "core/kernel_level.h"
#include "core/kernels/block_sparse.h"
#include "core/parallel.h"
#include "core/product_precision.h"
#include "core/rng.h"
#include "helpers.h"

using namespace shamn;

namespace {

int64_t active_blocks(double sparsity, int64_t nib) {
  return std::max<int64_t>(1, std::llround((1.0 - sparsity) * static_cast<double>(nib)));
}

// Each block row draws `active` distinct column blocks, sorted ascending.
std::vector<int32_t> random_pattern(const BlockSparseDims& d, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<int32_t> ci;
  for (int64_t r = 0; r < d.row_blocks(); ++r) {
    std::vector<int32_t> cols(static_cast<size_t>(d.col_blocks()));
    for (size_t c = 0; c < cols.size(); ++c) cols[c] = static_cast<int32_t>(c);
    for (size_t c = 0; c + 1 < cols.size(); ++c)  // Fisher-Yates
      std::swap(cols[c], cols[c + rng.below(cols.size() - c)]);
    cols.resize(static_cast<size_t>(d.active));
    std::sort(cols.begin(), cols.end());
    ci.insert(ci.end(), cols.begin(), cols.end());
  }
  return ci;
}

BlockSparseDims make_dims(int64_t block, int64_t nib, int64_t nob, double sparsity) {
  BlockSparseDims d;
  d.block = block;
  d.in = nib * block;
  d.out = nob * block;
  d.active = active_blocks(sparsity, nib);
  return d;
}

// |got - want| <= tol * (1 + |want|) everywhere; reports the first offender.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                 const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::abs(static_cast<double>(want[i]))))) {  // NaN fails too
      INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
      CHECK(err <= tol * (1.0 + std::abs(static_cast<double>(want[i]))));
      return;
    }
  }
  SUCCEED();
}

// |got - want| <= rel * magnitude everywhere, magnitude being the sum of |every
// term| of that output (run_magnitudes): the scale of the rounding error of
// any order of adds, whatever the data; reports the first offender.
void check_within(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& magnitude, double rel, const char* what) {
  REQUIRE(got.size() == want.size());
  REQUIRE(got.size() == magnitude.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= rel * magnitude[i])) {
      INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i] << ", terms' magnitude "
                << magnitude[i]);
      CHECK(err <= rel * magnitude[i]);
      return;
    }
  }
  SUCCEED();
}

struct Problem {
  BlockSparseDims d;
  int64_t n;
  std::vector<int32_t> ci;
  std::vector<float> x, values, bias, dy;
  Problem(const BlockSparseDims& dims, int64_t tokens, uint64_t seed) : d(dims), n(tokens) {
    ci = random_pattern(d, seed);
    x = test::uniform_floats(n * d.in, seed + 1);
    values = test::uniform_floats(d.value_count(), seed + 2);
    bias = test::uniform_floats(d.out, seed + 3);
    dy = test::uniform_floats(n * d.out, seed + 4);
  }
};

// Runs all four float kernels; backward outputs start from non-zero values so that
// accumulation (+=) is checked too.
struct Results {
  std::vector<float> y, dx, dvalues, dbias;
};

Results run_fast(const Problem& p, bool with_bias) {
  Results r;
  r.y.assign(static_cast<size_t>(p.n * p.d.out), 0.0f);
  r.dx = test::uniform_floats(p.n * p.d.in, 91);
  r.dvalues = test::uniform_floats(p.d.value_count(), 92);
  r.dbias = test::uniform_floats(p.d.out, 93);
  block_sparse_forward(r.y.data(), p.x.data(), p.values.data(), p.ci.data(),
                       with_bias ? p.bias.data() : nullptr, p.n, p.d);
  block_sparse_backward_input(r.dx.data(), p.dy.data(), p.values.data(), p.ci.data(), p.n, p.d);
  block_sparse_backward_values(r.dvalues.data(), p.dy.data(), p.x.data(), p.ci.data(), p.n, p.d);
  block_sparse_backward_bias(r.dbias.data(), p.dy.data(), p.n, p.d);
  return r;
}

// magnitudes: the starting gradients as their absolute values (run_magnitudes).
Results run_naive(const Problem& p, bool with_bias, bool magnitudes = false) {
  Results r;
  r.y.assign(static_cast<size_t>(p.n * p.d.out), 0.0f);
  r.dx = test::uniform_floats(p.n * p.d.in, 91);
  r.dvalues = test::uniform_floats(p.d.value_count(), 92);
  r.dbias = test::uniform_floats(p.d.out, 93);
  if (magnitudes)
    for (std::vector<float>* v : {&r.dx, &r.dvalues, &r.dbias})
      for (float& f : *v) f = std::abs(f);
  block_sparse_forward_naive(r.y.data(), p.x.data(), p.values.data(), p.ci.data(),
                             with_bias ? p.bias.data() : nullptr, p.n, p.d);
  block_sparse_backward_input_naive(r.dx.data(), p.dy.data(), p.values.data(), p.ci.data(), p.n, p.d);
  block_sparse_backward_values_naive(r.dvalues.data(), p.dy.data(), p.x.data(), p.ci.data(), p.n, p.d);
  block_sparse_backward_bias_naive(r.dbias.data(), p.dy.data(), p.n, p.d);
  return r;
}

// The naive kernels over |x|, |values|, |bias|, |dy| and |the starting
// gradients|: each output's sum of the magnitudes of the terms added into it.
Results run_magnitudes(Problem p, bool with_bias) {
  for (std::vector<float>* v : {&p.x, &p.values, &p.bias, &p.dy})
    for (float& f : *v) f = std::abs(f);
  return run_naive(p, with_bias, /*magnitudes=*/true);
}

}  // namespace

TEST_CASE("block-sparse kernels: fast equals naive over shapes, blocks and sparsities",
          "[kernels][block_sparse]") {
  // Float sums over up to a*b = 1280 (forward) or N = 130 terms in another
  // order: a few float epsilons (6e-8) per term at most, relative to the sum of
  // the terms' magnitudes. One term missing or wrong is far outside it.
  constexpr double kRel = 2e-5;
  for (int64_t block : {16, 32, 64, 48, 8})
    for (auto [nib, nob] : {std::pair<int64_t, int64_t>{20, 3}, {5, 9}})
      for (double s : {0.0, 0.5, 0.9, 0.95})
        for (int64_t n : {1, 7, 33, 130}) {
          const BlockSparseDims d = make_dims(block, nib, nob, s);
          DYNAMIC_SECTION("b " << block << " in " << d.in << " out " << d.out << " s " << s << " (a "
                               << d.active << ") N " << n) {
            const Problem p(d, n, static_cast<uint64_t>(block * 1000 + nib * 10 + n));
            const bool with_bias = n % 2 == 1 || s > 0.5;
            const Results fast = run_fast(p, with_bias);
            const Results naive = run_naive(p, with_bias);
            const Results mag = run_magnitudes(p, with_bias);
            check_within(fast.y, naive.y, mag.y, kRel, "y");
            check_within(fast.dx, naive.dx, mag.dx, kRel, "dx");
            check_within(fast.dvalues, naive.dvalues, mag.dvalues, kRel, "dvalues");
            check_within(fast.dbias, naive.dbias, mag.dbias, kRel, "dbias");
          }
        }
}

TEST_CASE("block-sparse kernels: bit-identical for 1 and 2 threads", "[kernels][block_sparse][determinism]") {
  test::ThreadCountGuard guard;
  for (int64_t block : {16, 32, 64})
    for (int64_t n : {20, 700}) {
      DYNAMIC_SECTION("b " << block << " N " << n) {
        const BlockSparseDims d = make_dims(block, 512 / block, 768 / block, 0.5);
        const Problem p(d, n, 17);
        set_num_threads(1);
        const Results one = run_fast(p, true);
        set_num_threads(2);
        const Results two = run_fast(p, true);
        CHECK(test::same_bits(one.y, two.y));
        CHECK(test::same_bits(one.dx, two.dx));
        CHECK(test::same_bits(one.dvalues, two.dvalues));
        CHECK(test::same_bits(one.dbias, two.dbias));
      }
    }
}

TEST_CASE("block-sparse grad values: chunks summed in parallel give the bits of the serial chunk loop",
          "[kernels][block_sparse][determinism]") {
  // 32 active blocks: fewer than 4 per thread at 16 threads, so the token chunks
  // (five of them, the last one short) become the parallel work there; 1 and 2
  // threads walk the chunks in order.
  test::ThreadCountGuard guard;
  const BlockSparseDims d = make_dims(32, 16, 16, 0.9);
  const Problem p(d, 1100, 23);
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 16}) {
    set_num_threads(threads);
    grads.push_back(test::uniform_floats(d.value_count(), 92));
    block_sparse_backward_values(grads.back().data(), p.dy.data(), p.x.data(), p.ci.data(), p.n, d);
  }
  CHECK(test::same_bits(grads[0], grads[1]));
  CHECK(test::same_bits(grads[0], grads[2]));
}

TEST_CASE("block-sparse grad values: bands read in place give the bits of packed bands",
          "[kernels][block_sparse][determinism]") {
  // Readers 1 packs every band, a huge threshold none; the default packs dy at
  // 4 or more active blocks and x where its columns have 4 or more readers:
  // a = 2 (90%) reads both in place, a = 10 (50% of 20) packs dy, the out-wide
  // 90% shape packs x (16 block rows x 2 over 20 columns is below 4, 64 x 2 is
  // not). 300 tokens: a full chunk and a short one, accumulated in order.
  test::ThreadCountGuard guard;
  struct Shape {
    int64_t block, nib, nob;
    double sparsity;
  };
  for (const Shape& sh : {Shape{32, 20, 16, 0.9}, Shape{16, 20, 3, 0.5}, Shape{16, 20, 64, 0.9},
                          Shape{32, 8, 8, 0.75}, Shape{64, 6, 4, 0.0}})
    for (int threads : {1, 2}) {
      const BlockSparseDims d = make_dims(sh.block, sh.nib, sh.nob, sh.sparsity);
      DYNAMIC_SECTION("b " << sh.block << " in " << d.in << " out " << d.out << " a " << d.active
                           << " threads " << threads) {
        set_num_threads(threads);
        const Problem p(d, 300, 31);
        std::vector<std::vector<float>> grads;
        for (int64_t readers : {int64_t{1}, int64_t{1} << 40, int64_t{0}}) {
          set_grad_values_pack_readers(readers);
          grads.push_back(test::uniform_floats(d.value_count(), 92));
          block_sparse_backward_values(grads.back().data(), p.dy.data(), p.x.data(), p.ci.data(), p.n, d);
        }
        set_grad_values_pack_readers(0);
        CHECK(test::same_bits(grads[0], grads[1]));
        CHECK(test::same_bits(grads[0], grads[2]));
      }
    }
}

TEST_CASE("block-sparse products reading gathered, activated rows give the bits of the products on a copy",
          "[kernels][block_sparse][determinism]") {
  // The experts' up reads its tokens' rows of u by index and their down reads
  // gelu of the up's output: the kernels gather and activate as they pack.
  // Blocks 16 and 32 take the fast kernels' two tile shapes, 8 the naive loops;
  // 300 rows of a 500-row x, with repeats, are no multiple of any tile.
  test::ThreadCountGuard guard;
  const int64_t n = 300, source_rows_count = 500;
  Rng rng(41, 3);
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int32_t& r : rows) r = static_cast<int32_t>(rng.below(static_cast<uint64_t>(source_rows_count)));
  struct Source {
    bool gathered;
    InputActivation act;
  };
  for (int64_t block : {8, 16, 32})
    for (const Source& sc : {Source{true, InputActivation::none}, Source{false, InputActivation::gelu},
                             Source{true, InputActivation::gelu}, Source{false, InputActivation::silu}})
      for (ProductPrecision prec : {ProductPrecision::f32, ProductPrecision::bf16})
        for (int threads : {1, 2}) {
          const BlockSparseDims d = make_dims(block, 6, 5, 0.5);
          DYNAMIC_SECTION("b " << block << " gathered " << sc.gathered << " act " << static_cast<int>(sc.act)
                               << " bf16 " << (prec == ProductPrecision::bf16) << " threads " << threads) {
            set_num_threads(threads);
            const Problem p(d, sc.gathered ? source_rows_count : n, 51);
            const RowSource src{sc.gathered ? rows.data() : nullptr, sc.act};
            const std::vector<float> copy = source_rows(p.x.data(), n, d.in, src);
            const std::vector<float> raw =
                source_rows(p.x.data(), n, d.in, {src.rows, InputActivation::none});
            // y from src, from the copy, and from the rows without the activation.
            std::vector<std::vector<float>> y(3, std::vector<float>(static_cast<size_t>(n * d.out)));
            std::vector<std::vector<float>> dv(3, test::uniform_floats(d.value_count(), 92));
            block_sparse_forward(y[0].data(), p.x.data(), p.values.data(), p.ci.data(), p.bias.data(), n, d,
                                 prec, src);
            block_sparse_backward_values(dv[0].data(), p.dy.data(), p.x.data(), p.ci.data(), n, d, prec, src);
            const float* plain[] = {copy.data(), raw.data()};
            for (int k = 0; k < 2; ++k) {
              block_sparse_forward(y[k + 1].data(), plain[k], p.values.data(), p.ci.data(), p.bias.data(), n,
                                   d, prec);
              block_sparse_backward_values(dv[k + 1].data(), p.dy.data(), plain[k], p.ci.data(), n, d, prec);
            }
            CHECK(test::same_bits(y[0], y[1]));
            CHECK(test::same_bits(dv[0], dv[1]));
            if (sc.act != InputActivation::none) {  // the activation was applied
              CHECK_FALSE(test::same_bits(y[0], y[2]));
              CHECK_FALSE(test::same_bits(dv[0], dv[2]));
            }
          }
        }
}

TEST_CASE("block-sparse forward with a residual gives the bits of the product followed by the add",
          "[kernels][block_sparse][determinism]") {
  // The mixer's out projection adds its residual to each finished tile. Blocks
  // 16 and 32 take the two tile shapes, 8 the naive loops; 7 rows split the
  // blocks between tasks, 300 rows are no multiple of any tile.
  test::ThreadCountGuard guard;
  const int64_t source_rows_count = 500;
  std::vector<int32_t> rows(static_cast<size_t>(source_rows_count));
  Rng rng(43, 3);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng.below(static_cast<uint64_t>(source_rows_count)));
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    const ScopedKernelLevel scoped(level);
    for (int64_t block : {8, 16, 32})
      for (int64_t n : {7, 300})
        for (bool gathered : {false, true})
          for (ProductPrecision prec : {ProductPrecision::f32, ProductPrecision::bf16})
            for (int threads : {1, 2}) {
              DYNAMIC_SECTION(kernel_level_name(level)
                              << " b " << block << " N " << n << " gathered " << gathered << " bf16 "
                              << (prec == ProductPrecision::bf16) << " threads " << threads) {
                set_num_threads(threads);
                const BlockSparseDims d = make_dims(block, 6, 5, 0.5);
                const Problem p(d, gathered ? source_rows_count : n, 61);
                const RowSource src{gathered ? rows.data() : nullptr,
                                    gathered ? InputActivation::none : InputActivation::silu};
                const std::vector<float> residual = test::uniform_floats(n * d.out, 62);
                std::vector<float> fused(static_cast<size_t>(n * d.out), std::nanf(""));
                std::vector<float> product(fused.size());
                block_sparse_forward(fused.data(), p.x.data(), p.values.data(), p.ci.data(), p.bias.data(), n,
                                     d, prec, src, residual.data());
                block_sparse_forward(product.data(), p.x.data(), p.values.data(), p.ci.data(), p.bias.data(),
                                     n, d, prec, src);
                std::vector<float> added(fused.size());
                for (size_t i = 0; i < added.size(); ++i) added[i] = residual[i] + product[i];
                CHECK(test::same_bits(fused, added));
                CHECK_FALSE(test::same_bits(fused, product));
              }
            }
  }
}

TEST_CASE("block-sparse forward and grad input read f32 rows in place with the bits of packed rows",
          "[kernels][block_sparse][determinism]") {
  // The f32 token tiles read x's rows (gathered or not) and dy's rows where they
  // lie; packed copies must give the same sums. Blocks 16 and 32 take the two
  // tile shapes (AVX-512's narrow one always packs); 7 rows split the blocks between tasks and 300 leave a
  // partial panel, whose missing rows repeat the last one; 16 threads split the blocks into groups too. Grad
  // input both adds and overwrites.
  test::ThreadCountGuard guard;
  const int64_t source_rows_count = 500;
  std::vector<int32_t> rows(static_cast<size_t>(source_rows_count));
  Rng rng(47, 3);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng.below(static_cast<uint64_t>(source_rows_count)));
  for (KernelLevel level : {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    const ScopedKernelLevel scoped(level);
    for (int64_t block : {16, 32})
      for (int64_t n : {7, 300})
        for (bool gathered : {false, true})
          for (int threads : {1, 2, 16}) {
            DYNAMIC_SECTION(kernel_level_name(level) << " b " << block << " N " << n << " gathered "
                                                     << gathered << " threads " << threads) {
              set_num_threads(threads);
              const BlockSparseDims d = make_dims(block, 6, 5, 0.5);
              const Problem p(d, gathered ? source_rows_count : n, 71);
              const RowSource src{gathered ? rows.data() : nullptr, InputActivation::none};
              const std::vector<float> residual = test::uniform_floats(n * d.out, 72);
              // [0] packed, [1] in place.
              std::vector<std::vector<float>> y(2), yr(2), dx(2), dx_fresh(2);
              for (int in_place = 0; in_place < 2; ++in_place) {
                set_block_sparse_rows_in_place(in_place == 1);
                y[in_place].assign(static_cast<size_t>(n * d.out), std::nanf(""));
                yr[in_place] = y[in_place];
                block_sparse_forward(y[in_place].data(), p.x.data(), p.values.data(), p.ci.data(),
                                     p.bias.data(), n, d, ProductPrecision::f32, src);
                block_sparse_forward(yr[in_place].data(), p.x.data(), p.values.data(), p.ci.data(), nullptr,
                                     n, d, ProductPrecision::f32, src, residual.data());
                dx[in_place] = test::uniform_floats(n * d.in, 73);
                dx_fresh[in_place].assign(static_cast<size_t>(n * d.in), std::nanf(""));
                block_sparse_backward_input(dx[in_place].data(), p.dy.data(), p.values.data(), p.ci.data(), n,
                                            d);
                block_sparse_backward_input(dx_fresh[in_place].data(), p.dy.data(), p.values.data(),
                                            p.ci.data(), n, d, ProductPrecision::f32, true);
              }
              set_block_sparse_rows_in_place(true);
              CHECK(test::same_bits(y[0], y[1]));
              CHECK(test::same_bits(yr[0], yr[1]));
              CHECK(test::same_bits(dx[0], dx[1]));
              CHECK(test::same_bits(dx_fresh[0], dx_fresh[1]));
            }
          }
  }
}

TEST_CASE("block-sparse grad input with overwrite writes over garbage what adding into zeros gives",
          "[kernels][block_sparse][determinism]") {
  test::ThreadCountGuard guard;
  // At 90% sparsity most column blocks of 20 have no active block: their
  // gradient is zero and must still be written. Block 48 runs the naive loops.
  for (int64_t block : {16, 32, 48})
    for (int64_t n : {7, 130})
      for (int threads : {1, 2}) {
        DYNAMIC_SECTION("b " << block << " N " << n << " threads " << threads) {
          set_num_threads(threads);
          const BlockSparseDims d = make_dims(block, 20, 3, 0.9);
          const Problem p(d, n, 29);
          std::vector<float> added(static_cast<size_t>(n * d.in), 0.0f);
          std::vector<float> written(added.size(), std::numeric_limits<float>::quiet_NaN());
          block_sparse_backward_input(added.data(), p.dy.data(), p.values.data(), p.ci.data(), n, d);
          block_sparse_backward_input(written.data(), p.dy.data(), p.values.data(), p.ci.data(), n, d,
                                      ProductPrecision::f32, true);
          CHECK(test::same_bits(written, added));
          std::vector<float> naive(added.size(), std::numeric_limits<float>::quiet_NaN());
          block_sparse_backward_input_naive(naive.data(), p.dy.data(), p.values.data(), p.ci.data(), n, d,
                                            true);
          check_close(naive, added, 2e-5, "dx");
        }
      }
}

TEST_CASE("block-sparse grad values with overwrite writes over garbage what adding into zeros gives",
          "[kernels][block_sparse][determinism]") {
  test::ThreadCountGuard guard;
  // n of one token chunk, of several in turn (1 thread), and of enough chunks to
  // be computed in parallel and folded in order (2 threads); block 48 runs the
  // naive loops. Under bf16 and with x read through rows and GELU as well.
  for (int64_t block : {16, 32, 48})
    for (int64_t n : {7, 600, 2100})
      for (int threads : {1, 2})
        for (const auto precision : {ProductPrecision::f32, ProductPrecision::bf16}) {
          DYNAMIC_SECTION("b " << block << " N " << n << " threads " << threads
                               << (precision == ProductPrecision::bf16 ? " bf16" : " f32")) {
            set_num_threads(threads);
            const BlockSparseDims d = make_dims(block, 6, 4, 0.5);
            const Problem p(d, n, 31);
            std::vector<int32_t> rows(static_cast<size_t>(n));
            for (int64_t t = 0; t < n; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7) % n);
            for (const RowSource src : {RowSource{}, RowSource{rows.data(), InputActivation::gelu}}) {
              std::vector<float> added(static_cast<size_t>(d.value_count()), 0.0f);
              std::vector<float> written(added.size(), std::numeric_limits<float>::quiet_NaN());
              block_sparse_backward_values(added.data(), p.dy.data(), p.x.data(), p.ci.data(), n, d,
                                           precision, src);
              block_sparse_backward_values(written.data(), p.dy.data(), p.x.data(), p.ci.data(), n, d,
                                           precision, src, true);
              CHECK(test::same_bits(written, added));
            }
          }
        }
}

TEST_CASE("block-sparse kernels: sparsity 0 equals the dense matmul", "[kernels][block_sparse]") {
  for (int64_t block : {16, 32, 64}) {
    DYNAMIC_SECTION("b " << block) {
      const BlockSparseDims d = make_dims(block, 256 / block, 192 / block, 0.0);
      REQUIRE(d.active == d.col_blocks());
      const int64_t n = 45;
      const Problem p(d, n, 5);
      // W[r*b + i, c*b + k] = values[r, m, i, k] with c = col_index[r, m] = m.
      std::vector<float> w(static_cast<size_t>(d.out * d.in));
      for (int64_t r = 0; r < d.row_blocks(); ++r)
        for (int64_t m = 0; m < d.active; ++m)
          for (int64_t i = 0; i < block; ++i)
            for (int64_t k = 0; k < block; ++k)
              w[(r * block + i) * d.in + p.ci[r * d.active + m] * block + k] =
                  p.values[((r * d.active + m) * block + i) * block + k];

      std::vector<float> y_ref(static_cast<size_t>(n * d.out));
      for (int64_t t = 0; t < n; ++t) std::copy(p.bias.begin(), p.bias.end(), y_ref.begin() + t * d.out);
      gemm(Trans::no, Trans::yes, n, d.out, d.in, 1.0f, p.x.data(), d.in, w.data(), d.in, 1.0f, y_ref.data(),
           d.out);
      std::vector<float> dx_ref(static_cast<size_t>(n * d.in));
      gemm(Trans::no, Trans::no, n, d.in, d.out, 1.0f, p.dy.data(), d.out, w.data(), d.in, 0.0f,
           dx_ref.data(), d.in);
      std::vector<float> dw_ref(static_cast<size_t>(d.out * d.in));
      gemm(Trans::yes, Trans::no, d.out, d.in, n, 1.0f, p.dy.data(), d.out, p.x.data(), d.in, 0.0f,
           dw_ref.data(), d.in);

      std::vector<float> y(static_cast<size_t>(n * d.out)), dx(static_cast<size_t>(n * d.in));
      std::vector<float> dvalues(static_cast<size_t>(d.value_count()));
      block_sparse_forward(y.data(), p.x.data(), p.values.data(), p.ci.data(), p.bias.data(), n, d);
      block_sparse_backward_input(dx.data(), p.dy.data(), p.values.data(), p.ci.data(), n, d);
      block_sparse_backward_values(dvalues.data(), p.dy.data(), p.x.data(), p.ci.data(), n, d);
      std::vector<float> dvalues_ref(dvalues.size());
      for (int64_t r = 0; r < d.row_blocks(); ++r)
        for (int64_t m = 0; m < d.active; ++m)
          for (int64_t i = 0; i < block; ++i)
            for (int64_t k = 0; k < block; ++k)
              dvalues_ref[((r * d.active + m) * block + i) * block + k] =
                  dw_ref[(r * block + i) * d.in + p.ci[r * d.active + m] * block + k];
      check_close(y, y_ref, 2e-5, "y");
      check_close(dx, dx_ref, 2e-5, "dx");
      check_close(dvalues, dvalues_ref, 2e-5, "dvalues");
    }
  }
}

TEST_CASE("block-sparse kernels: check_block_pattern rejects bad patterns", "[kernels][block_sparse]") {
  BlockSparseDims d;
  d.block = 16;
  d.in = 64;   // 4 column blocks
  d.out = 32;  // 2 block rows
  d.active = 2;
  const std::vector<int32_t> good{0, 3, 1, 2};
  CHECK_NOTHROW(check_block_pattern(good.data(), d));
  const std::vector<int32_t> unsorted{3, 0, 1, 2};
  CHECK_THROWS_WITH(check_block_pattern(unsorted.data(), d), Catch::Contains("not sorted"));
  const std::vector<int32_t> repeated{1, 1, 0, 2};
  CHECK_THROWS_WITH(check_block_pattern(repeated.data(), d), Catch::Contains("distinct"));
  const std::vector<int32_t> too_big{0, 4, 1, 2};
  CHECK_THROWS_WITH(check_block_pattern(too_big.data(), d), Catch::Contains("outside [0, 4)"));
  const std::vector<int32_t> negative{0, 1, -1, 2};
  CHECK_THROWS_WITH(check_block_pattern(negative.data(), d), Catch::Contains("outside [0, 4)"));
  BlockSparseDims too_many = d;
  too_many.active = 5;
  CHECK_THROWS_WITH(check_block_pattern(good.data(), too_many), Catch::Contains("active blocks"));
  BlockSparseDims ragged = d;
  ragged.in = 72;
  CHECK_THROWS_WITH(check_block_pattern(good.data(), ragged), Catch::Contains("multiples"));
}
