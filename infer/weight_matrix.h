#pragma once
// A weight matrix of the runtime, read in place from a mapped .shq file:
// [rows, cols] row-major, each row either f32 or quantised along cols into
// BlockQ8 / BlockQ4 blocks (the last one zero-padded).
//
// Quantised blocks are either row-major (each row's blocks side by side) or
// row-interleaved in tiles of 16 rows (infer/quant_tiles.h), the layout whose
// products are fast; the runtime takes either.
//
// Inputs to a quantised matrix are quantised once per row of activations to
// Q8 blocks with the same blocking (quantize_row_q8), so every product is an
// integer block dot; inputs to an f32 matrix stay f32.
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"
#include "infer/shq_format.h"

namespace shamn {

enum class WeightType { f32, q8, q4 };

const char* weight_type_name(WeightType type);

// One row of activations in the form a matrix wants: f for f32 weights, q for quantised ones.
struct InputRow {
  const float* f = nullptr;    // [cols]
  const BlockQ8* q = nullptr;  // [quant_blocks(cols)]
};

struct WeightMatrix {
  WeightType type = WeightType::f32;
  int64_t rows = 0, cols = 0;
  // Rows are cut into segments of this many values, each quantised on its own
  // (its last block zero-padded); 0 means one segment per row. Block-sparse
  // rows are their active blocks side by side, one segment each.
  int64_t segment = 0;
  bool tiled = false;  // quantised only: row-interleaved tiles
  const void* data = nullptr;

  bool quantized() const { return type != WeightType::f32; }
  int64_t segment_length() const { return segment > 0 ? segment : cols; }
  int64_t blocks_per_row() const { return cols / segment_length() * quant_blocks(segment_length()); }
  size_t row_bytes() const;  // one row's data (tiles pad the last one's rows)
  size_t bytes() const;

  // y[i] = W[r0 + i] . x for i < n, on the calling thread. A tiled matrix
  // needs r0 to be a multiple of 16 (kTileRows).
  void dot_rows(int64_t r0, int64_t n, InputRow x, float* y) const;
  // Quantised only. y[t * y_stride + i] = W[r0 + i] . (x row t) for i < n,
  // t < x.n, through the epilogue e (its bias indexed by i): the
  // matrix-matrix product of batched prefill and evaluation, bitwise dot_rows
  // row by row. A tiled matrix needs r0 % kTileRows == 0.
  void dot_rows_batch(int64_t r0, int64_t n, const Q8Rows& x, float* y, int64_t y_stride,
                      const TileEpilogue& e = {}) const;
  // Asks the CPU to start loading row r (row-major layouts; a no-op for tiled
  // ones): random rows are read from DRAM, and naming them early overlaps the misses.
  // to_l2: a prefetch with low temporal locality (prefetcht2: into L2 on the
  // Zen 5 this was measured on), for rows needed after the next ones.
  void prefetch_row(int64_t r, bool to_l2 = false) const;
  // acc[c] += w * W[r, c] for c < cols (dequantised).
  void add_row(int64_t r, float w, float* acc) const;
};

// A .shq tensor as a matrix: the last dim is the columns, the others the rows
// (dtype f32, q8_0, q4_0, q8_0x16 or q4_0x16; checked by the caller).
WeightMatrix weight_matrix_view(ShqDType dtype, const Shape& shape, const void* data);

}  // namespace shamn
