#include "infer/quant_tiles.h"

#include <cmath>
#include <cstring>

#include "infer/quant_dot_paths.h"
#include "infer/quant_kernels.h"

namespace shamn {
namespace {

using quant_detail::kLanes;
using quant_detail::sum_lanes;

int32_t tile_isum(const TileQ8& w, int64_t r, const BlockQ8& x) {
  int32_t s = 0;
  for (int i = 0; i < kQuantBlock; ++i) s += int32_t{w.q[i / 4][r][i % 4]} * int32_t{x.q[i]};
  return s;
}

int32_t tile_isum(const TileQ4& w, int64_t r, const BlockQ8& x) {
  int32_t s = 0;
  for (int i = 0; i < kQuantBlock / 2; ++i) {
    const uint8_t v = w.q[i / 4][r][i % 4];
    s += ((v & 0x0F) - 8) * int32_t{x.q[i]} + ((v >> 4) - 8) * int32_t{x.q[i + 16]};
  }
  return s;
}

// The canonical order of infer/quant_dot.h, row by row.
template <class Tile>
void dot_tiles_scalar(const Tile* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const Tile* wt = w + r / kTileRows * bpr;
    const int64_t i = r % kTileRows;
    float lanes[kLanes] = {};
    for (int64_t j = 0; j < bpr; ++j)
      lanes[j % kLanes] =
          std::fma(wt[j].d[i] * x[j].d, static_cast<float>(tile_isum(wt[j], i, x[j])), lanes[j % kLanes]);
    y[r] = sum_lanes(lanes);
  }
}

}  // namespace

void pack_tiles(const BlockQ8* src, int64_t rows, int64_t bpr, TileQ8* out) {
  for (int64_t t = 0; t < row_tiles(rows); ++t)
    for (int64_t j = 0; j < bpr; ++j) {
      TileQ8& tile = out[t * bpr + j];
      std::memset(&tile, 0, sizeof(tile));
      for (int64_t i = 0; i < kTileRows && t * kTileRows + i < rows; ++i) {
        const BlockQ8& b = src[(t * kTileRows + i) * bpr + j];
        tile.d[i] = b.d;
        for (int k = 0; k < kQuantBlock; ++k) tile.q[k / 4][i][k % 4] = b.q[k];
      }
    }
}

void pack_tiles(const BlockQ4* src, int64_t rows, int64_t bpr, TileQ4* out) {
  for (int64_t t = 0; t < row_tiles(rows); ++t)
    for (int64_t j = 0; j < bpr; ++j) {
      TileQ4& tile = out[t * bpr + j];
      std::memset(&tile, 0, sizeof(tile));
      for (int64_t i = 0; i < kTileRows && t * kTileRows + i < rows; ++i) {
        const BlockQ4& b = src[(t * kTileRows + i) * bpr + j];
        tile.d[i] = b.d;
        // Both layouts pair element k with k + 16 in one byte.
        for (int k = 0; k < kQuantBlock / 2; ++k) tile.q[k / 4][i][k % 4] = b.q[k];
      }
    }
}

BlockQ8 tile_block(const TileQ8* tiles, int64_t bpr, int64_t r, int64_t j) {
  const TileQ8& tile = tiles[r / kTileRows * bpr + j];
  const int64_t i = r % kTileRows;
  BlockQ8 b;
  b.d = tile.d[i];
  for (int k = 0; k < kQuantBlock; ++k) b.q[k] = tile.q[k / 4][i][k % 4];
  return b;
}

BlockQ4 tile_block(const TileQ4* tiles, int64_t bpr, int64_t r, int64_t j) {
  const TileQ4& tile = tiles[r / kTileRows * bpr + j];
  const int64_t i = r % kTileRows;
  BlockQ4 b;
  b.d = tile.d[i];
  for (int k = 0; k < kQuantBlock / 2; ++k) b.q[k] = tile.q[k / 4][i][k % 4];
  return b;
}

void add_scaled_tile_row_q8(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc) {
  quant_kernels().add_scaled_tile_q8(tiles, bpr, i, w, acc);
}

void dot_tiles(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  quant_kernels().q8.dot_tiles(w, rows, bpr, x, y);
}

void dot_tiles(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  quant_kernels().q4.dot_tiles(w, rows, bpr, x, y);
}

void dot_tiles_batch(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y, int64_t y_stride,
                     const TileEpilogue& e) {
  quant_kernels().q8.dot_tiles_batch(w, rows, bpr, x, y, y_stride, e);
}

void dot_tiles_batch(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y, int64_t y_stride,
                     const TileEpilogue& e) {
  quant_kernels().q4.dot_tiles_batch(w, rows, bpr, x, y, y_stride, e);
}

}  // namespace shamn

namespace shamn::quant_detail {

void add_scaled_tile_q8_scalar(const TileQ8* tiles, int64_t bpr, int64_t i, float w, float* acc) {
  for (int64_t j = 0; j < bpr; ++j) {
    const BlockQ8 b = tile_block(tiles, bpr, i, j);
    add_scaled_q8_scalar(&b, kQuantBlock, w, acc + j * kQuantBlock);
  }
}

void dot_tiles_q8_scalar(const TileQ8* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  dot_tiles_scalar(w, rows, bpr, x, y);
}
void dot_tiles_q4_scalar(const TileQ4* w, int64_t rows, int64_t bpr, const BlockQ8* x, float* y) {
  dot_tiles_scalar(w, rows, bpr, x, y);
}
void dot_tiles_batch_q8_scalar(const TileQ8* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e) {
  dot_tiles_batch_by_row(dot_tiles_q8_scalar, w, rows, bpr, x, y, y_stride, e);
}
void dot_tiles_batch_q4_scalar(const TileQ4* w, int64_t rows, int64_t bpr, const Q8Rows& x, float* y,
                               int64_t y_stride, const TileEpilogue& e) {
  dot_tiles_batch_by_row(dot_tiles_q4_scalar, w, rows, bpr, x, y, y_stride, e);
}

}  // namespace shamn::quant_detail
