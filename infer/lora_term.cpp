#include "infer/lora_term.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/intrinsics.h"
#include "core/parallel.h"
#include "infer/few_rows_q8.h"
#include "infer/low_rank_q8.h"
#include "infer/quant_tiles.h"

namespace shamn::forward_detail {
namespace {

#if defined(__AVX2__) && defined(__FMA__)
// Outputs [c0, c0 + 8 * kWide) of add_low_rank: kWide independent chains a k,
// 8 outputs each, the sums in registers.
template <int kWide>
void add_low_rank_chunk(float* y, const float* t, const float* bt, int64_t r, int64_t stride, int64_t c0,
                        float scale) {
  __m256 acc[kWide];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t k = 0; k < r; ++k) {
    const __m256 tk = _mm256_set1_ps(t[k]);
    const float* b = bt + k * stride + c0;
    for (int v = 0; v < kWide; ++v) acc[v] = _mm256_fmadd_ps(tk, _mm256_loadu_ps(b + 8 * v), acc[v]);
  }
  for (int v = 0; v < kWide; ++v)
    _mm256_storeu_ps(y + c0 + 8 * v,
                     _mm256_fmadd_ps(_mm256_set1_ps(scale), acc[v], _mm256_loadu_ps(y + c0 + 8 * v)));
}
#endif

// y [o0, o1) += scale * sum_k t[k] bt[k] (bt: [r, stride], y and bt indexed
// by output): B t for one row's outputs o0..o1 (an f32 adapter's B), summed
// over k in registers, so y is read and written once. Each output
// is one chain, fma(t[k], b, acc) over k from 0, then y = fma(scale, acc, y),
// in the vector chunks and the scalar tail alike: a row's bits do not depend
// on where its outputs fall. (Left to the compiler the chunk's sums went
// through memory every k: 4.6x the base product's time at rank 8, bench_low_rank.)
void add_low_rank(float* y, const float* t, const float* bt, int64_t r, int64_t stride, int64_t o0,
                  int64_t o1, float scale) {
  int64_t c0 = o0;
#if defined(__AVX2__) && defined(__FMA__)
  constexpr int kWide = 4;  // chains a k in the main loop
  for (; c0 + 8 * kWide <= o1; c0 += 8 * kWide) add_low_rank_chunk<kWide>(y, t, bt, r, stride, c0, scale);
  for (; c0 + 8 <= o1; c0 += 8) add_low_rank_chunk<1>(y, t, bt, r, stride, c0, scale);
#endif
  for (int64_t j = c0; j < o1; ++j) {
    float acc = 0.0f;
    for (int64_t k = 0; k < r; ++k) acc = std::fma(t[k], bt[k * stride + j], acc);
    y[j] += scale * acc;  // contracted to fma(scale, acc, y) where the baseline has FMA
  }
}

}  // namespace

void LoraTerm::build(const Adapters& ad, const LoraFactors* const* picked, const LoraInput& in,
                     const int32_t* tokens, int64_t n) {
  const int64_t A = static_cast<int64_t>(ad.list.size());
  int64_t r_max = 0;
  for (int64_t a = 0; a < A; ++a)
    if (const LoraFactors* f = picked[a]) r_max = std::max(r_max, f->a.rows);
  if (r_max == 0) return;
  r_stride_ = r_max;
  tb_ = quant_blocks(r_max);
  // One allocation per term (a decode step makes one per adapted matrix):
  // factors [A], group offsets [A + 1], rows [n], t [n, r], tq [n, tb], sums [n, tb].
  const auto floats = [](int64_t count, size_t size) { return (count * static_cast<int64_t>(size) + 3) / 4; };
  arena_ = Buffer<float>(floats(A, sizeof(void*)) + floats(A + 1, 4) + floats(n, 4) + n * r_max +
                         floats(n * tb_, sizeof(BlockQ8)) + floats(n * tb_, 4));
  float* p = arena_.data();
  const auto carve = [&p, &floats]<class T>(T*& out, int64_t count) {
    out = reinterpret_cast<T*>(p);
    p += floats(count, sizeof(T));
  };
  // The pointer array by hand: clang-tidy reads sizeof of a pointer type as a slip.
  factors_ = reinterpret_cast<const LoraFactors**>(p);
  p += floats(A, sizeof(void*));
  carve(offsets_, A + 1);
  carve(rows_, n);
  carve(t_, n * r_max);
  carve(tq_, n * tb_);
  carve(tq_sums_, n * tb_);
  groups_ = A;
  // The rows of each adapter that adapts this matrix, in row order (a counting sort).
  std::fill_n(offsets_, A + 1, 0);
  for (int64_t a = 0; a < A; ++a) factors_[a] = picked[a];
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = ad.of_row[tokens ? tokens[i] : i];
    if (a >= 0 && factors_[a] != nullptr) ++offsets_[a + 1];
  }
  for (int64_t a = 0; a < A; ++a) offsets_[a + 1] += offsets_[a];
  // offsets_[a] walks through group a while it fills, ending where group a + 1 starts.
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = ad.of_row[tokens ? tokens[i] : i];
    if (a >= 0 && factors_[a] != nullptr) rows_[offsets_[a]++] = static_cast<int32_t>(i);
  }
  for (int64_t a = A; a > 0; --a) offsets_[a] = offsets_[a - 1];
  offsets_[0] = 0;
  // A x for each adapted row, at its place in rows_. With a quantised input:
  // a rank <= 8 A two rows at a time (infer/few_rows_q8.h, AVX-512), else an
  // adapter with many rows through the batched tile product (each tile of A
  // read once for all of them); others one row at a time.
  for (int64_t a = 0; a < A; ++a) {
    const LoraFactors* f = factors_[a];
    const int64_t begin = offsets_[a], m = offsets_[a + 1] - begin;
    if (m == 0) continue;
    const int64_t r = f->a.rows;
    const bool whole_rows = f->a.quantized() && in.xq != nullptr;
    const bool pairs = whole_rows && f->a8 && few_rows_q8_available();
    if (pairs || (whole_rows && m >= kBatchedRows)) {
      Buffer<int32_t> x_ids(m);
      for (int64_t k = 0; k < m; ++k) x_ids[k] = in.x_rows ? in.x_rows[rows_[begin + k]] : rows_[begin + k];
      const Q8Rows q{in.xq->q.data(), m, f->a.blocks_per_row(), nullptr, x_ids.data(), in.xq->sums.data()};
      if (pairs) {
        parallel_for(0, (m + 1) / 2, grain_for(2 * r * in.in), [&](int64_t lo, int64_t hi) {
          const int64_t u0 = 2 * lo, un = std::min(m, 2 * hi) - u0;
          few_rows_q8_batch(f->a8, Q8Rows{q.x, un, q.stride, nullptr, q.rows + u0, q.sums},
                            t_ + (begin + u0) * r_stride_, r_stride_);
        });
      } else {
        parallel_for(0, row_tiles(r), grain_for(kTileRows * in.in * m), [&](int64_t lo, int64_t hi) {
          for (int64_t c = lo; c < hi; ++c)
            f->a.dot_rows_batch(c * kTileRows, std::min(kTileRows, r - c * kTileRows), q,
                                t_ + begin * r_stride_ + c * kTileRows, r_stride_);
        });
      }
      for (int64_t k = begin; k < begin + m; ++k) quantize_t(k, r);
      continue;
    }
    parallel_for(begin, begin + m, grain_for(r * in.in), [&](int64_t lo, int64_t hi) {
      std::vector<BlockQ8> own;  // an f32 base's rows, or segments that are not whole blocks
      for (int64_t k = lo; k < hi; ++k) {
        const int64_t i = rows_[k], x_id = in.x_rows ? in.x_rows[i] : i;
        const float* x = in.x + x_id * in.in;
        float* t = t_ + k * r_stride_;
        if (!f->a.quantized()) {
          f->a.dot_rows(0, r, InputRow{x, nullptr}, t);
          continue;
        }
        // A in the runtime's tiles, one row at a time (the single-row tile
        // kernel: as fast as 8-row chunks at rank 8, twice as fast at 32).
        const BlockQ8* xq = nullptr;
        if (in.xq != nullptr) {
          xq = in.xq->q.data() + x_id * f->a.blocks_per_row();
        } else {
          own.resize(static_cast<size_t>(quant_blocks(in.in)));
          quantize_row_q8(x, own.data(), in.in);
          xq = own.data();
        }
        f->a.dot_rows(0, r, InputRow{nullptr, xq}, t);
        quantize_t(k, r);
      }
    });
  }
}

void LoraTerm::add(float* y, int64_t y_stride, int64_t o0, int64_t o1) const {
  for (int64_t a = 0; a < groups_; ++a) {
    const LoraFactors* f = factors_[a];
    const int64_t begin = offsets_[a], m = offsets_[a + 1] - begin;
    if (m == 0) continue;
    if (f->a.quantized()) {
      low_rank_add_q8(f->bq, tq_ + begin * tb_, tq_sums_ + begin * tb_, tb_, m, rows_ + begin, f->scale, y,
                      y_stride, o0, o1);
    } else {
      const int64_t r = f->a.rows, out = static_cast<int64_t>(f->bt.size()) / r;
      for (int64_t k = begin; k < begin + m; ++k)
        add_low_rank(y + rows_[k] * y_stride, t_ + k * r_stride_, f->bt.data(), r, out, o0, o1, f->scale);
    }
  }
}

void LoraTerm::quantize_t(int64_t k, int64_t r) const {
  quantize_row_q8_sums(t_ + k * r_stride_, tq_ + k * tb_, tq_sums_ + k * tb_, r);
}

}  // namespace shamn::forward_detail
