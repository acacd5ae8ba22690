#pragma once
// Internal to infer/: what each quantisation type needs from the kernels, one
// table per SIMD level (as ggml's type traits), picked for the level in use
// (core/kernel_level.h). Adding a type adds a row here; adding a level adds a
// table in quant_kernels.cpp.
#include <cstdint>

#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

namespace shamn {

struct FewRowsQ8;
struct LowRankQ8;
struct LowRankInput;

// W: the weight block type, Tile: its row-interleaved tile (infer/quant_tiles.h).
// Every entry gives bitwise the same floats at every level (infer/quant_dot.h).
template <class W, class Tile>
struct QuantTypeKernels {
  // w, x: [blocks]
  float (*dot)(const W* w, const BlockQ8* x, int64_t blocks);
  // w: [rows, bpr]  x: [bpr]  y: [rows]
  void (*dot_rows)(const W* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
  // w: [row_tiles(rows), bpr] tiles  x: [bpr]  y: [rows]
  void (*dot_tiles)(const Tile* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
  // The same for n rows of x: y [n, y_stride]
  void (*dot_tiles_batch)(const Tile* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                          int64_t y_stride, const TileEpilogue& e);
};

struct QuantKernels {
  QuantTypeKernels<BlockQ8, TileQ8> q8;
  QuantTypeKernels<BlockQ4, TileQ4> q4;
  // Activations are always quantised to Q8: x [n] -> out [quant_blocks(n)],
  // and when sums is not null each block's sum of values (quantize_row_q8_sums).
  void (*quantize_row_q8)(const float* x, BlockQ8* out, int32_t* sums, int64_t n);
  // acc[32 j + i] = fma(w, in[j].d * in[j].q[i], acc[32 j + i]) for j < blocks (add_scaled_row_q8)
  void (*add_scaled_q8)(const BlockQ8* in, int64_t blocks, float w, float* acc);
  // add_scaled_tile_row_q8 (infer/quant_tiles.h)
  void (*add_scaled_tile_q8)(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc);
  // sums[j] = the sum of block j's values (q8_block_sums, infer/low_rank_q8.h)
  void (*block_sums)(const BlockQ8* x, int64_t blocks, int32_t* sums);
  // low_rank_add_q8 (infer/low_rank_q8.h)
  void (*low_rank_add)(const LowRankQ8& w, const LowRankInput& in, float c, float* y, int64_t y_stride,
                       int64_t r0, int64_t r1);
  // few_rows_q8_batch (infer/few_rows_q8.h); null where the tiles serve as well
  void (*few_rows_batch)(const FewRowsQ8& w, const Q8Rows& x, float* t, int64_t t_stride);
};

const QuantKernels& quant_kernels();

}  // namespace shamn
