#pragma once
// Internal to infer/: the per-ISA dot paths and the scalar pieces they share,
// so every path scales and sums blocks in exactly the same order.
#include <cmath>
#include <cstdint>

#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

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

}  // namespace shamn::quant_detail
