#include "infer/weight_matrix.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/simd.h"
#include "infer/quant_dot.h"
#include "infer/quant_tiles.h"

namespace shamn {

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::f32:
      return "f32";
    case WeightType::q8:
      return "q8_0";
    case WeightType::q4:
      return "q4_0";
  }
  return "?";
}

// A tile is 16 rows' blocks, so a row takes the same bytes in either layout.
static_assert(sizeof(TileQ8) == kTileRows * sizeof(BlockQ8) && sizeof(TileQ4) == kTileRows * sizeof(BlockQ4));

size_t WeightMatrix::row_bytes() const {
  switch (type) {
    case WeightType::f32:
      return static_cast<size_t>(cols) * sizeof(float);
    case WeightType::q8:
      return static_cast<size_t>(blocks_per_row()) * sizeof(BlockQ8);
    case WeightType::q4:
      return static_cast<size_t>(blocks_per_row()) * sizeof(BlockQ4);
  }
  return 0;
}

size_t WeightMatrix::bytes() const {
  return row_bytes() * static_cast<size_t>(tiled ? row_tiles(rows) * kTileRows : rows);
}

void WeightMatrix::dot_rows(int64_t r0, int64_t n, InputRow x, float* y) const {
  switch (type) {
    case WeightType::f32: {
      const float* w = static_cast<const float*>(data) + r0 * cols;
      for (int64_t i = 0; i < n; ++i) y[i] = simd::dot(w + i * cols, x.f, cols);
      return;
    }
    case WeightType::q8:
      if (tiled) {
        SHAMN_CHECK(r0 % kTileRows == 0, "tiled rows start on a tile, got row ", r0);
        dot_tiles(static_cast<const TileQ8*>(data) + r0 / kTileRows * blocks_per_row(), n, blocks_per_row(),
                  x.q, y);
        return;
      }
      dot_rows_q8(static_cast<const BlockQ8*>(data) + r0 * blocks_per_row(), n, blocks_per_row(), x.q, y);
      return;
    case WeightType::q4:
      if (tiled) {
        SHAMN_CHECK(r0 % kTileRows == 0, "tiled rows start on a tile, got row ", r0);
        dot_tiles(static_cast<const TileQ4*>(data) + r0 / kTileRows * blocks_per_row(), n, blocks_per_row(),
                  x.q, y);
        return;
      }
      dot_rows_q4(static_cast<const BlockQ4*>(data) + r0 * blocks_per_row(), n, blocks_per_row(), x.q, y);
      return;
  }
}

void WeightMatrix::dot_rows_batch(int64_t r0, int64_t n, const Q8Rows& x, float* y, int64_t y_stride,
                                  const TileEpilogue& e) const {
  SHAMN_CHECK(quantized(), "dot_rows_batch takes quantised weights");
  const int64_t bpr = blocks_per_row();
  if (tiled) {
    SHAMN_CHECK(r0 % kTileRows == 0, "tiled rows start on a tile, got row ", r0);
    if (type == WeightType::q8)
      dot_tiles_batch(static_cast<const TileQ8*>(data) + r0 / kTileRows * bpr, n, bpr, x, y, y_stride, e);
    else
      dot_tiles_batch(static_cast<const TileQ4*>(data) + r0 / kTileRows * bpr, n, bpr, x, y, y_stride, e);
    return;
  }
  std::vector<BlockQ8> row(static_cast<size_t>(bpr));
  std::vector<float> dots(static_cast<size_t>(n));
  for (int64_t t = 0; t < x.n; ++t) {
    for (int64_t j = 0; j < bpr; ++j) row[j] = x.block(t, j);
    dot_rows(r0, n, InputRow{nullptr, row.data()}, dots.data());
    apply_epilogue(dots.data(), n, e, y + t * y_stride);
  }
}

WeightMatrix weight_matrix_view(ShqDType dtype, const Shape& shape, const void* data) {
  WeightMatrix w;
  w.type = dtype == ShqDType::f32                                  ? WeightType::f32
           : dtype == ShqDType::q8_0 || dtype == ShqDType::q8_0x16 ? WeightType::q8
                                                                   : WeightType::q4;
  w.tiled = shq_dtype_tiled(dtype);
  w.cols = shape.back();
  w.rows = shape_numel(shape) / w.cols;
  w.data = data;
  return w;
}

void WeightMatrix::prefetch_row(int64_t r, bool to_l2) const {
  if (tiled) return;
  const size_t n = row_bytes();
  const char* row = static_cast<const char*>(data) + static_cast<size_t>(r) * n;
  if (to_l2)
    for (size_t b = 0; b < n; b += 64) __builtin_prefetch(row + b, 0, 1);
  else
    for (size_t b = 0; b < n; b += 64) __builtin_prefetch(row + b);
}

void WeightMatrix::add_row(int64_t r, float w, float* acc) const {
  if (type == WeightType::f32) {
    const float* row = static_cast<const float*>(data) + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc[c] += w * row[c];
    return;
  }
  const int64_t seg = segment_length(), seg_blocks = quant_blocks(seg), bpr = blocks_per_row();
  if (type == WeightType::q8 && !tiled && (seg % kQuantBlock == 0 || seg == cols)) {
    add_scaled_row_q8(static_cast<const BlockQ8*>(data) + r * bpr, cols, w, acc);
    return;
  }
  if (type == WeightType::q8 && tiled && cols % kQuantBlock == 0 && seg % kQuantBlock == 0) {
    add_scaled_tile_row_q8(static_cast<const TileQ8*>(data) + r / kTileRows * bpr, bpr, r % kTileRows, w,
                           acc);
    return;
  }
  // Block by block, so the 32-value inner loops vectorise.
  for (int64_t s = 0; s < cols / seg; ++s)
    for (int64_t j = 0; j < seg_blocks; ++j) {
      const int64_t c0 = s * seg + j * kQuantBlock;
      const int len = static_cast<int>(std::min<int64_t>(kQuantBlock, seg - j * kQuantBlock));
      float* a = acc + c0;
      const int64_t j_row = s * seg_blocks + j;
      if (type == WeightType::q8) {
        // Row-major blocks are read in place: a copy made the vector loads wait
        // on the copy's narrower stores (a store-forwarding stall per block).
        BlockQ8 copy;
        const BlockQ8* b = &copy;
        if (tiled)
          copy = tile_block(static_cast<const TileQ8*>(data), bpr, r, j_row);
        else
          b = static_cast<const BlockQ8*>(data) + r * bpr + j_row;
        const float d = b->d;
        for (int i = 0; i < len; ++i) a[i] += w * (d * static_cast<float>(b->q[i]));
      } else {
        const BlockQ4 b = tiled ? tile_block(static_cast<const TileQ4*>(data), bpr, r, j_row)
                                : static_cast<const BlockQ4*>(data)[r * bpr + j_row];
        for (int i = 0; i < len; ++i) a[i] += w * (b.d * static_cast<float>(q4_value(b, i)));
      }
    }
}

}  // namespace shamn
