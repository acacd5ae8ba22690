#pragma once
// Internal to infer/: the per-ISA dot paths and the scalar pieces they share,
// so every path scales and sums blocks in exactly the same order.
#include <cmath>
#include <cstdint>
#include <vector>

#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

namespace shamn {
struct FewRowsQ8;
struct LowRankQ8;
struct LowRankInput;
}  // namespace shamn

namespace shamn::quant_detail {

inline constexpr int kLanes = 8;

inline int32_t block_isum(const BlockQ8& a, const BlockQ8& b) {
  int32_t s = 0;
  for (int i = 0; i < kQuantBlock; ++i) s += int32_t{a.q[i]} * int32_t{b.q[i]};
  return s;
}

inline int32_t block_isum(const BlockQ4& w, const BlockQ8& x) {
  int32_t s = 0;
  for (int i = 0; i < kQuantBlock; ++i) s += q4_value(w, i) * int32_t{x.q[i]};
  return s;
}

// Adds blocks [begin, end) into lanes[i % 8] in the canonical order.
template <class W>
void add_blocks_scalar(const W* w, const BlockQ8* x, int64_t begin, int64_t end, float* lanes) {
  for (int64_t i = begin; i < end; ++i)
    lanes[i % kLanes] =
        std::fma(w[i].d * x[i].d, static_cast<float>(block_isum(w[i], x[i])), lanes[i % kLanes]);
}

inline float sum_lanes(const float* lanes) {
  float s = lanes[0];
  for (int l = 1; l < kLanes; ++l) s += lanes[l];
  return s;
}

// The portable paths.
float dot_q8_q8_scalar(const BlockQ8* a, const BlockQ8* b, int64_t blocks);
float dot_q4_q8_scalar(const BlockQ4* w, const BlockQ8* x, int64_t blocks);
void dot_rows_q8_q8_scalar(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y);
void dot_rows_q4_q8_scalar(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y);
void dot_tiles_q8_scalar(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
void dot_tiles_q4_scalar(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);

float dot_q8_q8_avx2(const BlockQ8* a, const BlockQ8* b, int64_t blocks);
float dot_q4_q8_avx2(const BlockQ4* w, const BlockQ8* x, int64_t blocks);
float dot_q8_q8_avx512(const BlockQ8* a, const BlockQ8* b, int64_t blocks);
float dot_q4_q8_avx512(const BlockQ4* w, const BlockQ8* x, int64_t blocks);
void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n);
// The kernel-table forms (sums may be null): quantise, then sum the blocks.
void quantize_row_q8_sums_scalar(const float* x, BlockQ8* out, int32_t* sums, int64_t n);
void quantize_row_q8_sums_avx2(const float* x, BlockQ8* out, int32_t* sums, int64_t n);
// add_scaled_row_q8's kernels: the scalar one over n values (any n), the
// others over whole blocks.
void add_scaled_q8_scalar(const BlockQ8* in, int64_t n, float w, float* acc);
void add_scaled_blocks_q8_scalar(const BlockQ8* in, int64_t blocks, float w, float* acc);
void add_scaled_q8_avx2(const BlockQ8* in, int64_t blocks, float w, float* acc);
void add_scaled_q8_avx512(const BlockQ8* in, int64_t blocks, float w, float* acc);
void add_scaled_tile_q8_scalar(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc);
void add_scaled_tile_q8_avx2(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc);
void add_scaled_tile_q8_avx512(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc);
void quantize_row_q8_avx512(const float* x, BlockQ8* out, int32_t* sums, int64_t n);
// The paths of q8_block_sums and low_rank_add_q8 (infer/low_rank_q8.h); AVX-512 uses AVX2's sums.
void q8_block_sums_scalar(const BlockQ8* x, int64_t blocks, int32_t* sums);
void q8_block_sums_avx2(const BlockQ8* x, int64_t blocks, int32_t* sums);
void low_rank_add_q8_scalar(const LowRankQ8& w, const LowRankInput& in, float c, float* y, int64_t y_stride,
                            int64_t r0, int64_t r1);
void low_rank_add_q8_avx2(const LowRankQ8& w, const LowRankInput& in, float c, float* y, int64_t y_stride,
                          int64_t r0, int64_t r1);
void low_rank_add_q8_avx512(const LowRankQ8& w, const LowRankInput& in, float c, float* y, int64_t y_stride,
                            int64_t r0, int64_t r1);
// few_rows_q8_batch's path (infer/few_rows_q8.h); the other levels use the tiles.
void few_rows_q8_batch_avx512(const FewRowsQ8& w, const Q8Rows& x, float* t, int64_t t_stride);

// The SIMD quantisers scale by x * (1 / d), which is within 2.3e-5 of the exact
// x / d for |x / d| <= 127 (two roundings of 2^-24 each, plus x / d's own), so
// it rounds to the same integer unless a half lies within that distance. A
// block with a value that close to a half (or a non-finite 1 / d) takes the
// exact division, so the bytes stay those of the scalar path.
inline constexpr float kHalfMargin = 4e-5f;

// Block b of an n-value row: in place, or the zero-padded last block copied to buf.
inline const float* q8_source_block(const float* x, int64_t n, int64_t b, float* buf) {
  const float* src = x + b * kQuantBlock;
  if (n - b * kQuantBlock >= kQuantBlock) return src;
  const int64_t len = n - b * kQuantBlock;
  for (int64_t i = 0; i < kQuantBlock; ++i) buf[i] = i < len ? src[i] : 0.0f;
  return buf;
}

// y[r] = dot(w[r], x), r < rows: one dispatch for many short rows.
void dot_rows_q8_q8_avx2(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);
void dot_rows_q4_q8_avx2(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);
void dot_rows_q8_q8_avx512(const BlockQ8* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y);
void dot_rows_q4_q8_avx512(const BlockQ4* w, int64_t rows, int64_t blocks_per_row, const BlockQ8* x,
                           float* y);

// y[r] = dot(row r, x) over row-interleaved tiles (infer/quant_tiles.h).
void dot_tiles_q8_avx2(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
void dot_tiles_q4_avx2(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
void dot_tiles_q8_avx512(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
void dot_tiles_q4_avx512(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);

// The same over n rows of x (infer/quant_tiles.h, dot_tiles_batch).
void dot_tiles_batch_q8_scalar(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e);
void dot_tiles_batch_q4_scalar(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e);
void dot_tiles_batch_q8_avx2(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                             int64_t y_stride, const TileEpilogue& e);
void dot_tiles_batch_q4_avx2(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                             int64_t y_stride, const TileEpilogue& e);
void dot_tiles_batch_q8_avx512(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e);
void dot_tiles_batch_q4_avx512(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e);

// The batched product as one dot_tiles call per row of x (its blocks gathered
// first when x has an index): the scalar and AVX2 paths, whose per-row kernels
// gain little from sharing tile loads.
template <class Tile>
void dot_tiles_batch_by_row(void (*dot)(const Tile*, int64_t, int64_t, const BlockQ8*, float*), const Tile* w,
                            int64_t rows, int64_t bpr, const Q8Rows& x, float* y, int64_t y_stride,
                            const TileEpilogue& e) {
  constexpr int64_t kStack = 64;
  BlockQ8 stack[kStack];
  std::vector<BlockQ8> heap(x.index && bpr > kStack ? static_cast<size_t>(bpr) : 0);
  BlockQ8* gathered = bpr > kStack ? heap.data() : stack;
  std::vector<float> dots(e.plain() ? 0 : static_cast<size_t>(rows));
  for (int64_t t = 0; t < x.n; ++t) {
    const BlockQ8* row = x.row(t);
    if (x.index) {
      for (int64_t j = 0; j < bpr; ++j) gathered[j] = x.block(t, j);
      row = gathered;
    }
    if (e.plain()) {
      dot(w, rows, bpr, row, y + t * y_stride);
    } else {
      dot(w, rows, bpr, row, dots.data());
      apply_epilogue(dots.data(), rows, e, y + t * y_stride);
    }
  }
}

}  // namespace shamn::quant_detail
