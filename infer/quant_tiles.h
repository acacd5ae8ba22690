#pragma once
// Row-interleaved quantised weights: the layout the runtime's matrix-vector
// products read. A row-major Q8/Q4 matrix gives each output row its own short
// dot product, and for the block-sparse layers' rows of 1-2 blocks the
// horizontal sums and per-row scale handling cost more than the multiplies
// (experiments/inference.md). A tile holds one quantisation block of 16
// consecutive rows, with each row's values interleaved four at a time:
//
//   TileQ8: d[r] = the scale of row r's block; q[g][r][i] = element 4g + i of row r.
//   TileQ4: d[r] likewise; q[g][r][i] holds element 4g + i in its low nibble
//           and element 16 + 4g + i in its high nibble (value = nibble - 8).
//
// So one 64-byte load of q[g] is element group g of all 16 rows, and a single
// VNNI instruction multiplies it by four broadcast input values into 16 row
// sums: no horizontal reduction. Each tile's scales and values are exactly the
// BlockQ8 / BlockQ4 of the row-major layout (infer/quant_blocks.h), moved.
//
// A matrix of R rows and B blocks per row is ceil(R / 16) row tiles of B tiles
// each, tile (t, j) at index t * B + j; rows past R are zero (d = 0, q = 0).
// Both tile sizes are multiples of 64 bytes, so tiles stay cache-line aligned
// in a 64-byte-aligned file.
#include <cstddef>
#include <cstdint>

#include "infer/quant_blocks.h"

namespace shamn {

inline constexpr int64_t kTileRows = 16;

struct TileQ8 {
  float d[kTileRows];
  int8_t q[kQuantBlock / 4][kTileRows][4];
};
static_assert(sizeof(TileQ8) == 576 && sizeof(TileQ8) % 64 == 0, "TileQ8 is 16 scales + 16 x 32 bytes");
static_assert(offsetof(TileQ8, q) == 64);

struct TileQ4 {
  float d[kTileRows];
  uint8_t q[kQuantBlock / 8][kTileRows][4];
};
static_assert(sizeof(TileQ4) == 320 && sizeof(TileQ4) % 64 == 0, "TileQ4 is 16 scales + 16 x 16 bytes");
static_assert(offsetof(TileQ4, q) == 64);

inline constexpr int64_t row_tiles(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }

// src: [rows, bpr] row-major blocks  out: [row_tiles(rows), bpr]
void pack_tiles(const BlockQ8* src, int64_t rows, int64_t bpr, TileQ8* out);
void pack_tiles(const BlockQ4* src, int64_t rows, int64_t bpr, TileQ4* out);
// Row r's block j back in row-major form.
BlockQ8 tile_block(const TileQ8* tiles, int64_t bpr, int64_t r, int64_t j);
BlockQ4 tile_block(const TileQ4* tiles, int64_t bpr, int64_t r, int64_t j);

// tiles: one row tile's bpr tiles  acc: [bpr * 32]. Row i (< 16) of them
// dequantised and scaled into acc as add_scaled_row_q8 does (the same bits):
// an embedding row read straight from the tiled table the head multiplies by.
void add_scaled_tile_row_q8(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc);

// w: [row_tiles(rows), bpr] tiles  x: [bpr]  y: [rows]
// y[r] = dot(row r, x), the same float as dot_q8_q8 / dot_q4_q8 on the
// row-major layout (the canonical order of infer/quant_dot.h), on the calling
// thread, through the selected kernel path.
void dot_tiles(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);
void dot_tiles(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y);

// n rows of quantised activations, the right-hand side of the batched product:
// row t's block j is x[row(t) * stride + (index ? index[j] : j)], row(t) =
// rows ? rows[t] : t. The index lets a block-sparse row block read its active
// input segments where they lie; rows lets an expert read its routed tokens.
// sums, when given, holds each block's sum of values at the block's offset in
// x (what the VNNI path needs to undo its unsigned offset; computed per call
// when null).
struct Q8Rows {
  const BlockQ8* x = nullptr;
  int64_t n = 0, stride = 0;
  const int32_t* index = nullptr;  // [bpr] or null
  const int32_t* rows = nullptr;   // [n] or null
  const int32_t* sums = nullptr;   // like x, or null
  int64_t offset(int64_t t, int64_t j) const {
    return (rows ? rows[t] : t) * stride + (index ? index[j] : j);
  }
  const BlockQ8* row(int64_t t) const { return x + (rows ? rows[t] : t) * stride; }
  const BlockQ8& block(int64_t t, int64_t j) const { return x[offset(t, j)]; }
};

// What a batched product does with each result on its way out, while it is
// still in a register: y = dot + bias[r] (no bias: dot), or with accumulate
// y = y + (dot + bias[r]). The same floats as storing dot and adding the bias,
// then the product to y, in passes of their own (which cost a pass over y
// each, and a store-forwarding stall where they ran right behind the kernel).
struct TileEpilogue {
  const float* bias = nullptr;  // [rows] of this call, or null
  bool accumulate = false;
  bool plain() const { return bias == nullptr && !accumulate; }
};

// w: [row_tiles(rows), bpr] tiles  x: n rows of bpr blocks  y: [n, y_stride]
// y[t * y_stride + r] = dot(row r, x row t), through the epilogue e: the
// matrix-matrix form of prefill and evaluation. Bitwise dot_tiles row by row
// of x, but the fast path loads each tile once for a group of x rows instead
// of once per row.
void dot_tiles_batch(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y, int64_t y_stride,
                     const TileEpilogue& e = {});
void dot_tiles_batch(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y, int64_t y_stride,
                     const TileEpilogue& e = {});

// out[i] = dot[i] through e, for one row of n results (the scalar epilogue).
inline void apply_epilogue(const float* dot, int64_t n, const TileEpilogue& e, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = e.bias ? dot[i] + e.bias[i] : dot[i];
    out[i] = e.accumulate ? out[i] + v : v;
  }
}

}  // namespace shamn
