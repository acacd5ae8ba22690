#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "helpers.h"
#include "infer/quant_blocks.h"
#include "infer/quant_dot.h"
#include "infer/quant_tiles.h"

using namespace shamn;

namespace {

// 1-32: one block (a LoRA adapter's t, a block-sparse segment of 16 or 4
// values), each of its two vectors full, partial or empty.
const int64_t kLengths[] = {1, 7, 16, 17, 31, 32, 33, 127, 4096};
const KernelLevel kAllKernels[] = {KernelLevel::scalar, KernelLevel::avx2, KernelLevel::avx512};

// Puts the process-wide kernel back after a test changes it.
struct KernelGuard {
  KernelLevel saved = kernel_level();
  ~KernelGuard() { set_kernel_level(saved); }
};

enum class Fill { random, zeros, extremes, outlier };

std::vector<float> make_row(int64_t n, Fill fill, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (fill) {
      case Fill::random:
      case Fill::outlier:
        x[i] = uniform(gen);
        break;
      case Fill::zeros:
        x[i] = 0.0f;
        break;
      case Fill::extremes:  // every value at +-max|x|: q = +-127 (q8), +-7 (q4)
        x[i] = (gen() & 1) ? 3.0f : -3.0f;
        break;
    }
  }
  if (fill == Fill::outlier) x[static_cast<size_t>(n / 2)] = 1.0e6f;
  return x;
}

const char* fill_name(Fill f) {
  switch (f) {
    case Fill::random:
      return "random";
    case Fill::zeros:
      return "zeros";
    case Fill::extremes:
      return "extremes";
    case Fill::outlier:
      return "outlier";
  }
  return "?";
}

template <class Block, class Quantize, class Dequantize>
void check_round_trip(Quantize quantize, Dequantize dequantize, float levels) {
  for (int64_t n : kLengths) {
    for (Fill fill : {Fill::random, Fill::zeros, Fill::extremes, Fill::outlier}) {
      INFO("n = " << n << ", " << fill_name(fill));
      const std::vector<float> x = make_row(n, fill, 11);
      std::vector<Block> q(static_cast<size_t>(quant_blocks(n)));
      quantize(x.data(), q.data(), n);
      std::vector<float> y(static_cast<size_t>(n));
      dequantize(q.data(), y.data(), n);
      for (int64_t b = 0; b < quant_blocks(n); ++b) {
        float amax = 0.0f;
        for (int64_t i = b * kQuantBlock; i < std::min(n, (b + 1) * kQuantBlock); ++i)
          amax = std::max(amax, std::fabs(x[i]));
        REQUIRE(q[b].d == amax / levels);
      }
      for (int64_t i = 0; i < n; ++i) {
        const float d = q[i / kQuantBlock].d;
        REQUIRE(std::isfinite(y[i]));
        // d/2 from rounding, plus a few ulps from x/d and d*q being rounded floats.
        REQUIRE(std::fabs(x[i] - y[i]) <= 0.5f * d * (1.0f + 1e-5f) + 1e-30f);
      }
    }
  }
}

// Plain f64 dot of the dequantised rows: what the integer kernels approximate.
template <class W>
double dequantised_dot(const std::vector<W>& w, const std::vector<BlockQ8>& x, double* magnitude) {
  double sum = 0.0, mag = 0.0;
  for (size_t b = 0; b < w.size(); ++b) {
    for (int i = 0; i < kQuantBlock; ++i) {
      int wi;
      if constexpr (std::is_same_v<W, BlockQ4>)
        wi = q4_value(w[b], i);
      else
        wi = w[b].q[i];
      const double term = double(w[b].d) * wi * double(x[b].d) * x[b].q[i];
      sum += term;
      mag += std::fabs(term);
    }
  }
  *magnitude = mag;
  return sum;
}

// Raw blocks with every code the format allows (q8: -127..127, q4: all 16 nibbles,
// including -8 which our quantiser never writes but a file may hold).
std::vector<BlockQ8> raw_q8(int64_t blocks, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<BlockQ8> out(static_cast<size_t>(blocks));
  for (auto& b : out) {
    b.d = std::uniform_real_distribution<float>(0.0f, 2.0f)(gen);
    for (auto& v : b.q) v = static_cast<int8_t>(static_cast<int>(gen() % 255) - 127);
  }
  return out;
}
std::vector<BlockQ4> raw_q4(int64_t blocks, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<BlockQ4> out(static_cast<size_t>(blocks));
  for (auto& b : out) {
    b.d = std::uniform_real_distribution<float>(0.0f, 2.0f)(gen);
    for (auto& v : b.q) v = static_cast<uint8_t>(gen() & 0xFF);
  }
  return out;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("q8 round trip is within half a step of every value", "[infer][quant]") {
  check_round_trip<BlockQ8>(quantize_row_q8, dequantize_row_q8, 127.0f);
}

TEST_CASE("q8 quantisation gives the same bytes on the scalar and SIMD paths, ties away from zero",
          "[infer][quant]") {
  KernelGuard guard;
  if (!kernel_level_supported(KernelLevel::avx2)) {
    WARN("skipping: this CPU lacks AVX2");
    return;
  }
  for (KernelLevel level : {KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    set_kernel_level(level);
    for (int64_t n : kLengths)
      for (Fill fill : {Fill::random, Fill::zeros, Fill::extremes, Fill::outlier}) {
        INFO("kernel " << kernel_level_name(level) << ", n = " << n << ", " << fill_name(fill));
        const std::vector<float> x = make_row(n, fill, 31);
        std::vector<BlockQ8> simd(quant_blocks(n)), scalar(quant_blocks(n));
        quantize_row_q8(x.data(), simd.data(), n);
        quantize_row_q8_scalar(x.data(), scalar.data(), n);
        CHECK(std::memcmp(simd.data(), scalar.data(), simd.size() * sizeof(BlockQ8)) == 0);
        // With the block sums, in one pass: the same bytes and each block's sum of values.
        std::vector<BlockQ8> fused(simd.size());
        std::vector<int32_t> sums(simd.size(), -1);
        quantize_row_q8_sums(x.data(), fused.data(), sums.data(), n);
        CHECK(std::memcmp(fused.data(), scalar.data(), fused.size() * sizeof(BlockQ8)) == 0);
        for (size_t b = 0; b < scalar.size(); ++b) {
          int32_t want = 0;
          for (int i = 0; i < kQuantBlock; ++i) want += scalar[b].q[i];
          CHECK(sums[b] == want);
        }
      }
  }
  // amax 127 makes d = 1, so k + 0.5 is an exact tie: it rounds away from zero.
  std::vector<float> ties(kQuantBlock, 0.0f);
  ties[0] = 127.0f;
  ties[1] = 2.5f;
  ties[2] = -3.5f;
  ties[3] = 0.5f;
  ties[4] = -0.5f;
  ties[5] = 0.49999997f;
  for (KernelLevel k : kAllKernels) {
    if (!kernel_level_supported(k)) continue;
    set_kernel_level(k);
    BlockQ8 b;
    quantize_row_q8(ties.data(), &b, kQuantBlock);
    INFO("kernel " << kernel_level_name(k));
    CHECK(b.d == 1.0f);
    CHECK(b.q[0] == 127);
    CHECK(b.q[1] == 3);
    CHECK(b.q[2] == -4);
    CHECK(b.q[3] == 1);
    CHECK(b.q[4] == -1);
    CHECK(b.q[5] == 0);
  }
}

TEST_CASE(
    "a row of one q8 block gives the bytes and sum of the same block in a longer row, non-finite values too",
    "[infer][quant]") {
  // The AVX-512 path quantises a one-block row on its own (quantize_one_block)
  // and longer rows 16 blocks at a time: the two must agree where the scalar
  // path defines nothing (a NaN or an infinity in the block: its cast to int8
  // is undefined, so only this path is run).
  KernelGuard guard;
  const float inf = INFINITY, nan = NAN;
  // (index, value) pairs. A max keeps a NaN only as its second operand, so a
  // NaN's lane decides whether d is NaN: lanes 15 and 31 are the second at
  // every step of the reduction (one kept, one dropped at the first), 14 and
  // 17 fall out at a later step.
  const std::vector<std::vector<std::pair<int, float>>> cases = {{{14, nan}},
                                                                 {{15, nan}},
                                                                 {{17, nan}},
                                                                 {{31, nan}},
                                                                 {{1, inf}, {30, -2.0f}},
                                                                 {{0, -inf}, {17, nan}},
                                                                 {{3, 1e38f}, {20, -1e38f}},
                                                                 {{0, -0.0f}}};
  if (!kernel_level_supported(KernelLevel::avx512)) {
    WARN("skipping: this CPU lacks AVX-512");
    return;
  }
  set_kernel_level(KernelLevel::avx512);
  for (int64_t n : {4, 16, 17, 32})
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("n = " << n << ", case " << c);
      std::vector<float> one(static_cast<size_t>(n), 0.5f);
      for (const auto& [i, v] : cases[c])
        if (i < n) one[static_cast<size_t>(i)] = v;
      std::vector<float> two(2 * kQuantBlock, 0.0f);
      std::copy(one.begin(), one.end(), two.begin());
      for (int64_t i = kQuantBlock; i < 2 * kQuantBlock; ++i) two[i] = 0.01f * static_cast<float>(i);
      BlockQ8 alone, within[2];
      int32_t sum_alone = -1, sums_within[2] = {-1, -1};
      quantize_row_q8_sums(one.data(), &alone, &sum_alone, n);
      quantize_row_q8_sums(two.data(), within, sums_within, 2 * kQuantBlock);
      CHECK(bits(alone.d) == bits(within[0].d));
      CHECK(std::memcmp(alone.q, within[0].q, sizeof(alone.q)) == 0);
      CHECK(sum_alone == sums_within[0]);
    }
}

TEST_CASE("q8 quantisation by reciprocal matches exact division on values near halves and at every scale",
          "[infer][quant]") {
  KernelGuard guard;
  if (!kernel_level_supported(KernelLevel::avx2)) {
    WARN("skipping: this CPU lacks AVX2");
    return;
  }
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 120), step(-127, 126);
  const int64_t blocks = 20000;
  std::vector<float> x(static_cast<size_t>(blocks * kQuantBlock));
  for (int64_t b = 0; b < blocks; ++b) {
    // Not a power of two: then x * (1 / d) and x / d round differently now and then.
    const float scale = std::ldexp(1.0f + 0.75f * std::abs(unit(gen)), exponent(gen));
    float* xb = x.data() + b * kQuantBlock;
    xb[0] = 127.0f * scale;  // amax: d is scale, up to rounding
    for (int i = 1; i < kQuantBlock; ++i) {
      // Half the blocks put values within a few ulps of k + 1/2 steps.
      const float v = b % 2 ? (static_cast<float>(step(gen)) + 0.5f) * scale : unit(gen) * 127.0f * scale;
      xb[i] = b % 2 && i % 3 ? std::nextafter(v, i % 3 == 1 ? -INFINITY : INFINITY) : v;
    }
  }
  std::vector<BlockQ8> simd(static_cast<size_t>(blocks)), scalar(simd.size());
  quantize_row_q8_scalar(x.data(), scalar.data(), blocks * kQuantBlock);
  for (KernelLevel level : {KernelLevel::avx2, KernelLevel::avx512}) {
    if (!kernel_level_supported(level)) continue;
    set_kernel_level(level);
    quantize_row_q8(x.data(), simd.data(), blocks * kQuantBlock);
    std::vector<BlockQ8> fused(simd.size());
    std::vector<int32_t> sums(simd.size());
    quantize_row_q8_sums(x.data(), fused.data(), sums.data(), blocks * kQuantBlock);
    for (int64_t b = 0; b < blocks; ++b) {
      INFO("kernel " << kernel_level_name(level) << ", block " << b << ", first value "
                     << x[b * kQuantBlock]);
      REQUIRE(std::memcmp(&simd[b], &scalar[b], sizeof(BlockQ8)) == 0);
      REQUIRE(std::memcmp(&fused[b], &scalar[b], sizeof(BlockQ8)) == 0);
      int32_t want = 0;
      for (int i = 0; i < kQuantBlock; ++i) want += scalar[b].q[i];
      REQUIRE(sums[b] == want);
    }
  }
}

TEST_CASE("q4 round trip is within half a step of every value", "[infer][quant]") {
  check_round_trip<BlockQ4>(quantize_row_q4, dequantize_row_q4, 7.0f);
}

TEST_CASE("quantised rows zero-pad their last block and zero blocks have scale 0", "[infer][quant]") {
  const std::vector<float> x = make_row(33, Fill::random, 3);
  std::vector<BlockQ8> q8(2);
  std::vector<BlockQ4> q4(2);
  quantize_row_q8(x.data(), q8.data(), 33);
  quantize_row_q4(x.data(), q4.data(), 33);
  for (int i = 1; i < kQuantBlock; ++i) {
    CHECK(q8[1].q[i] == 0);
    CHECK(q4_value(q4[1], i) == 0);
  }
  const std::vector<float> zeros(40, 0.0f);
  quantize_row_q8(zeros.data(), q8.data(), 40);
  quantize_row_q4(zeros.data(), q4.data(), 40);
  CHECK(q8[0].d == 0.0f);
  CHECK(q4[0].d == 0.0f);
  CHECK(q4_value(q4[0], 5) == 0);
}

TEST_CASE("a quantised row scaled into an accumulator is one fma per value on every path", "[infer][quant]") {
  KernelGuard guard;
  for (int64_t n : kLengths) {
    const std::vector<float> x = make_row(n, Fill::random, 41), start = make_row(n, Fill::random, 42);
    std::vector<BlockQ8> q(static_cast<size_t>(quant_blocks(n)));
    quantize_row_q8(x.data(), q.data(), n);
    const float w = 0.3712f;
    std::vector<float> want = start;
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8& b = q[i / kQuantBlock];
      want[i] = std::fma(w, b.d * static_cast<float>(b.q[i % kQuantBlock]), want[i]);
    }
    for (KernelLevel k : kAllKernels) {
      if (!kernel_level_supported(k)) continue;
      set_kernel_level(k);
      INFO("kernel " << kernel_level_name(k) << ", n = " << n);
      // Past n the accumulator is left alone.
      std::vector<float> acc = start;
      acc.push_back(-2.5f);
      add_scaled_row_q8(q.data(), n, w, acc.data());
      CHECK(acc.back() == -2.5f);
      acc.pop_back();
      CHECK(std::memcmp(acc.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("a row of a tiled matrix scales into an accumulator as the row-major row does, on every path",
          "[infer][quant]") {
  KernelGuard guard;
  const int64_t rows = 21, bpr = 5, cols = bpr * kQuantBlock;
  std::vector<BlockQ8> w8 = raw_q8(rows * bpr, 61);
  w8[3].q[7] = -128;
  std::vector<TileQ8> t8(static_cast<size_t>(row_tiles(rows) * bpr));
  pack_tiles(w8.data(), rows, bpr, t8.data());
  const std::vector<float> start = make_row(cols, Fill::random, 62);
  for (KernelLevel k : kAllKernels) {
    if (!kernel_level_supported(k)) continue;
    set_kernel_level(k);
    for (int64_t r = 0; r < rows; ++r) {
      INFO("kernel " << kernel_level_name(k) << ", row " << r);
      std::vector<float> want = start, got = start;
      add_scaled_row_q8(w8.data() + r * bpr, cols, -0.731f, want.data());
      add_scaled_tile_row_q8(t8.data() + r / kTileRows * bpr, bpr, r % kTileRows, -0.731f, got.data());
      REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("every quant kernel equals the scalar one bit for bit and the f64 dot closely", "[infer][quant]") {
  KernelGuard guard;
  for (KernelLevel k : kAllKernels) {
    if (!kernel_level_supported(k)) {
      WARN("skipping quant kernel " << kernel_level_name(k) << ": this CPU lacks it");
      continue;
    }
    for (int64_t n : kLengths) {
      for (Fill fill : {Fill::random, Fill::zeros, Fill::extremes, Fill::outlier}) {
        INFO("kernel " << kernel_level_name(k) << ", n = " << n << ", " << fill_name(fill));
        const int64_t blocks = quant_blocks(n);
        const std::vector<float> a = make_row(n, fill, 21), b = make_row(n, Fill::random, 22);
        std::vector<BlockQ8> qa(blocks), qb(blocks);
        std::vector<BlockQ4> wa(blocks);
        quantize_row_q8(a.data(), qa.data(), n);
        quantize_row_q8(b.data(), qb.data(), n);
        quantize_row_q4(a.data(), wa.data(), n);
        // Also blocks straight from every code the format allows.
        const std::vector<BlockQ8> ra = raw_q8(blocks, 5), rb = raw_q8(blocks, 6);
        const std::vector<BlockQ4> rw = raw_q4(blocks, 7);

        set_kernel_level(KernelLevel::scalar);
        const float s_q8 = dot_q8_q8(qa.data(), qb.data(), blocks);
        const float s_q4 = dot_q4_q8(wa.data(), qb.data(), blocks);
        const float s_raw8 = dot_q8_q8(ra.data(), rb.data(), blocks);
        const float s_raw4 = dot_q4_q8(rw.data(), rb.data(), blocks);
        set_kernel_level(k);
        CHECK(bits(dot_q8_q8(qa.data(), qb.data(), blocks)) == bits(s_q8));
        CHECK(bits(dot_q4_q8(wa.data(), qb.data(), blocks)) == bits(s_q4));
        CHECK(bits(dot_q8_q8(ra.data(), rb.data(), blocks)) == bits(s_raw8));
        CHECK(bits(dot_q4_q8(rw.data(), rb.data(), blocks)) == bits(s_raw4));

        double mag = 0.0;
        const double ref8 = dequantised_dot(qa, qb, &mag);
        CHECK(std::fabs(s_q8 - ref8) <= 1e-5 * mag + 1e-30);
        const double ref4 = dequantised_dot(wa, qb, &mag);
        CHECK(std::fabs(s_q4 - ref4) <= 1e-5 * mag + 1e-30);
        const double refr = dequantised_dot(rw, rb, &mag);
        CHECK(std::fabs(s_raw4 - refr) <= 1e-5 * mag);
      }
    }
  }
}

TEST_CASE("matvec and dot_rows equal the per-row scalar dot and do not depend on the thread count",
          "[infer][quant]") {
  KernelGuard guard;
  test::ThreadCountGuard threads;
  const int64_t rows = 101;
  // Short rows (fewer than 8 blocks, as block-sparse rows are) take a batched path.
  for (int64_t bpr : {1, 2, 3, 7, 8, 9, 17})
    for (KernelLevel k : kAllKernels) {
      if (!kernel_level_supported(k)) continue;
      INFO("kernel " << kernel_level_name(k) << ", blocks per row " << bpr);
      const std::vector<BlockQ8> w8 = raw_q8(rows * bpr, 1), x = raw_q8(bpr, 2);
      const std::vector<BlockQ4> w4 = raw_q4(rows * bpr, 3);
      set_kernel_level(k);
      std::vector<float> y8_1(rows), y8_2(rows), y4_1(rows), y4_2(rows);
      set_num_threads(1);
      matvec_q8(w8.data(), rows, bpr, x.data(), y8_1.data());
      matvec_q4(w4.data(), rows, bpr, x.data(), y4_1.data());
      set_num_threads(2);
      matvec_q8(w8.data(), rows, bpr, x.data(), y8_2.data());
      matvec_q4(w4.data(), rows, bpr, x.data(), y4_2.data());
      std::vector<float> rows8(rows), rows4(rows), scalar8(rows), scalar4(rows);
      dot_rows_q8(w8.data(), rows, bpr, x.data(), rows8.data());
      dot_rows_q4(w4.data(), rows, bpr, x.data(), rows4.data());
      set_kernel_level(KernelLevel::scalar);
      dot_rows_q8(w8.data(), rows, bpr, x.data(), scalar8.data());
      dot_rows_q4(w4.data(), rows, bpr, x.data(), scalar4.data());
      set_kernel_level(k);
      for (int64_t r = 0; r < rows; ++r) {
        CHECK(bits(rows8[r]) == bits(scalar8[r]));
        CHECK(bits(rows4[r]) == bits(scalar4[r]));
        CHECK(bits(y8_1[r]) == bits(dot_q8_q8(w8.data() + r * bpr, x.data(), bpr)));
        CHECK(bits(y4_1[r]) == bits(dot_q4_q8(w4.data() + r * bpr, x.data(), bpr)));
        CHECK(bits(y8_1[r]) == bits(y8_2[r]));
        CHECK(bits(y4_1[r]) == bits(y4_2[r]));
      }
    }
}

TEST_CASE(
    "row-interleaved tiles hold the row-major blocks and every path's dot equals the row-major dot bit for "
    "bit",
    "[infer][quant]") {
  KernelGuard guard;
  for (int64_t rows : {1, 15, 16, 17, 40})
    for (int64_t bpr : {1, 2, 3, 7, 8, 9, 17}) {
      // Blocks from every code the format allows, and -128 in Q8 weights too.
      std::vector<BlockQ8> w8 = raw_q8(rows * bpr, 31);
      w8[0].q[3] = -128;
      const std::vector<BlockQ4> w4 = raw_q4(rows * bpr, 32);
      const std::vector<BlockQ8> x = raw_q8(bpr, 33);
      std::vector<TileQ8> t8(static_cast<size_t>(row_tiles(rows) * bpr));
      std::vector<TileQ4> t4(t8.size());
      pack_tiles(w8.data(), rows, bpr, t8.data());
      pack_tiles(w4.data(), rows, bpr, t4.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < bpr; ++j) {
          const BlockQ8 b8 = tile_block(t8.data(), bpr, r, j);
          const BlockQ4 b4 = tile_block(t4.data(), bpr, r, j);
          REQUIRE(std::memcmp(&b8, &w8[r * bpr + j], sizeof(b8)) == 0);
          REQUIRE(std::memcmp(&b4, &w4[r * bpr + j], sizeof(b4)) == 0);
        }
      // Rows past the matrix are zero, so a padded tile adds nothing.
      if (rows % kTileRows) CHECK(t8.back().d[kTileRows - 1] == 0.0f);
      for (KernelLevel k : kAllKernels) {
        if (!kernel_level_supported(k)) continue;
        INFO("kernel " << kernel_level_name(k) << ", rows " << rows << ", blocks per row " << bpr);
        set_kernel_level(k);
        std::vector<float> y8(rows + 1, -7.0f), y4(rows + 1, -7.0f);
        dot_tiles(t8.data(), rows, bpr, x.data(), y8.data());
        dot_tiles(t4.data(), rows, bpr, x.data(), y4.data());
        set_kernel_level(KernelLevel::scalar);
        for (int64_t r = 0; r < rows; ++r) {
          CHECK(bits(y8[r]) == bits(dot_q8_q8(w8.data() + r * bpr, x.data(), bpr)));
          CHECK(bits(y4[r]) == bits(dot_q4_q8(w4.data() + r * bpr, x.data(), bpr)));
        }
        CHECK(y8[rows] == -7.0f);  // nothing written past the last row
        CHECK(y4[rows] == -7.0f);
      }
    }
}

TEST_CASE("the batched tile product equals dot_tiles row by row of x, on every path, with gathered blocks",
          "[infer][quant]") {
  KernelGuard guard;
  for (int64_t rows : {16, 17, 40})
    for (int64_t bpr : {1, 2, 8, 9, 17})
      for (int64_t n : {1, 3, 4, 5, 9})
        for (bool indexed : {false, true}) {
          std::vector<BlockQ8> w8 = raw_q8(rows * bpr, 41);
          w8[0].q[0] = -128;
          const std::vector<BlockQ4> w4 = raw_q4(rows * bpr, 42);
          std::vector<TileQ8> t8(static_cast<size_t>(row_tiles(rows) * bpr));
          std::vector<TileQ4> t4(t8.size());
          pack_tiles(w8.data(), rows, bpr, t8.data());
          pack_tiles(w4.data(), rows, bpr, t4.data());
          // x rows hold 2 * bpr + 1 blocks; an index picks bpr of them out of order.
          const int64_t stride = 2 * bpr + 1;
          const std::vector<BlockQ8> x = raw_q8(n * stride, 43);
          std::vector<int32_t> index(static_cast<size_t>(bpr));
          for (int64_t j = 0; j < bpr; ++j) index[j] = static_cast<int32_t>((2 * bpr - 2 * j + 1) % stride);
          const Q8Rows rows_x{x.data(), n, stride, indexed ? index.data() : nullptr};
          // The reference: each x row's blocks laid out in order, through the scalar dot_tiles.
          set_kernel_level(KernelLevel::scalar);
          std::vector<float> want8(static_cast<size_t>(n * rows)), want4(want8.size());
          for (int64_t t = 0; t < n; ++t) {
            std::vector<BlockQ8> row(static_cast<size_t>(bpr));
            for (int64_t j = 0; j < bpr; ++j) row[j] = rows_x.block(t, j);
            dot_tiles(t8.data(), rows, bpr, row.data(), want8.data() + t * rows);
            dot_tiles(t4.data(), rows, bpr, row.data(), want4.data() + t * rows);
          }
          for (KernelLevel k : kAllKernels) {
            if (!kernel_level_supported(k)) continue;
            INFO("kernel " << kernel_level_name(k) << ", rows " << rows << ", bpr " << bpr << ", n " << n
                           << (indexed ? ", indexed" : ""));
            set_kernel_level(k);
            // y rows are rows + 3 wide: the 3 past each row must stay untouched.
            const int64_t ys = rows + 3;
            std::vector<float> y8(static_cast<size_t>(n * ys), -7.0f), y4(y8.size(), -7.0f);
            dot_tiles_batch(t8.data(), rows, bpr, rows_x, y8.data(), ys);
            dot_tiles_batch(t4.data(), rows, bpr, rows_x, y4.data(), ys);
            for (int64_t t = 0; t < n; ++t) {
              for (int64_t r = 0; r < rows; ++r) {
                REQUIRE(bits(y8[t * ys + r]) == bits(want8[t * rows + r]));
                REQUIRE(bits(y4[t * ys + r]) == bits(want4[t * rows + r]));
              }
              for (int64_t r = rows; r < ys; ++r)
                REQUIRE((y8[t * ys + r] == -7.0f && y4[t * ys + r] == -7.0f));
            }
          }
        }
}

TEST_CASE("the batched tile product's epilogue adds a bias and accumulates as separate passes would",
          "[infer][quant]") {
  KernelGuard guard;
  for (int64_t rows : {16, 21})
    for (int64_t bpr : {1, 2, 5})
      for (int64_t n : {1, 4, 7})
        for (bool gathered : {false, true}) {
          const std::vector<BlockQ8> w8 = raw_q8(rows * bpr, 51);
          const std::vector<BlockQ4> w4 = raw_q4(rows * bpr, 52);
          std::vector<TileQ8> t8(static_cast<size_t>(row_tiles(rows) * bpr));
          std::vector<TileQ4> t4(t8.size());
          pack_tiles(w8.data(), rows, bpr, t8.data());
          pack_tiles(w4.data(), rows, bpr, t4.data());
          // Gathered: x's rows taken in reverse order through a token list (an expert's rows).
          const std::vector<BlockQ8> x = raw_q8(n * bpr, 53);
          std::vector<int32_t> tokens(static_cast<size_t>(n));
          for (int64_t t = 0; t < n; ++t) tokens[t] = static_cast<int32_t>(n - 1 - t);
          const Q8Rows rows_x{x.data(), n, bpr, nullptr, gathered ? tokens.data() : nullptr};
          const std::vector<float> bias = make_row(rows, Fill::random, 54),
                                   start = make_row(n * rows, Fill::random, 55);
          for (KernelLevel k : kAllKernels) {
            if (!kernel_level_supported(k)) continue;
            set_kernel_level(k);
            for (bool with_bias : {false, true})
              for (bool accumulate : {false, true}) {
                INFO("kernel " << kernel_level_name(k) << ", rows " << rows << ", bpr " << bpr << ", n " << n
                               << ", bias " << with_bias << ", accumulate " << accumulate << ", gathered "
                               << gathered);
                const TileEpilogue e{with_bias ? bias.data() : nullptr, accumulate};
                // The separate passes: the plain product, then y = y + (dot + bias).
                std::vector<float> dot8(static_cast<size_t>(n * rows)), dot4(dot8.size());
                dot_tiles_batch(t8.data(), rows, bpr, rows_x, dot8.data(), rows);
                dot_tiles_batch(t4.data(), rows, bpr, rows_x, dot4.data(), rows);
                if (gathered) {  // row t of the gathered product is x row tokens[t]'s
                  std::vector<float> in_order8(dot8.size()), in_order4(dot8.size());
                  dot_tiles_batch(t8.data(), rows, bpr, Q8Rows{x.data(), n, bpr}, in_order8.data(), rows);
                  dot_tiles_batch(t4.data(), rows, bpr, Q8Rows{x.data(), n, bpr}, in_order4.data(), rows);
                  for (int64_t t = 0; t < n; ++t)
                    for (int64_t r = 0; r < rows; ++r) {
                      REQUIRE(bits(dot8[t * rows + r]) == bits(in_order8[tokens[t] * rows + r]));
                      REQUIRE(bits(dot4[t * rows + r]) == bits(in_order4[tokens[t] * rows + r]));
                    }
                }
                std::vector<float> y8 = start, y4 = start;
                dot_tiles_batch(t8.data(), rows, bpr, rows_x, y8.data(), rows, e);
                dot_tiles_batch(t4.data(), rows, bpr, rows_x, y4.data(), rows, e);
                for (int64_t t = 0; t < n; ++t)
                  for (int64_t r = 0; r < rows; ++r) {
                    const int64_t i = t * rows + r;
                    float want8 = dot8[i], want4 = dot4[i];
                    if (with_bias) {
                      want8 += bias[r];
                      want4 += bias[r];
                    }
                    if (accumulate) {
                      want8 = start[i] + want8;
                      want4 = start[i] + want4;
                    }
                    REQUIRE(bits(y8[i]) == bits(want8));
                    REQUIRE(bits(y4[i]) == bits(want4));
                  }
              }
          }
        }
}

TEST_CASE("quant kernel names are checked", "[infer][quant]") {
  KernelGuard guard;
  CHECK(kernel_level_from_string("scalar", "--kernel") == KernelLevel::scalar);
  CHECK_THROWS_AS(kernel_level_from_string("sse", "--kernel"), InputError);
  CHECK_THROWS_WITH(kernel_level_from_string("AVX2", "--kernel"),
                    Catch::Contains("use scalar, avx2 or avx512"));
  CHECK_THROWS_AS(kernel_level_from_string("", "--kernel"), InputError);
  for (KernelLevel k : kAllKernels) {
    if (kernel_level_supported(k)) {
      CHECK(kernel_level_from_string(kernel_level_name(k), "--kernel") == k);
    } else {
      CHECK_THROWS_AS(kernel_level_from_string(kernel_level_name(k), "--kernel"), InputError);
      CHECK_THROWS_AS(set_kernel_level(k), InputError);
    }
  }
  CHECK(kernel_level_supported(best_kernel_level()));
}
