#pragma once
// A quantised matrix of at most 8 rows (a LoRA adapter's A [r, in], r <= 8)
// laid out for many rows of x. In the runtime's tiles of 16 rows such a
// matrix fills half of every vpdpbusd; here two rows of x share a register,
// x row u in lanes 0-7 and row u + 1 in lanes 8-15, each lane pair meeting
// the same weights, so every lane does work.
//
// Built from the matrix's tiles (infer/quant_tiles.h), rows 0-7 of its one
// tile row, each block's weights duplicated into both halves of a register.
// The results are the tiles' (infer/quant_dot.h's canonical order), bit for
// bit: per row, block j is fma'd into lane j % 8 from +0, the lanes summed
// left to right.
#include <cstdint>

#include "core/buffer.h"
#include "infer/quant_blocks.h"
#include "infer/quant_tiles.h"

namespace shamn {

struct FewRowsQ8 {
  static constexpr int64_t kMaxRows = 8;
  int64_t rows = 0, blocks = 0;
  Buffer<int8_t> packed;   // [blocks, 8 groups, 2 halves, 8 rows, 4 values]
  Buffer<float> d;         // [blocks, 2 halves, 8 rows]; 0 past `rows`
  Buffer<int32_t> offset;  // [blocks, 2 halves, 8 rows]: -128 * the row's sum of the block's weights

  explicit operator bool() const { return rows > 0; }
};

// tiles: [blocks] TileQ8, one tile row of a matrix with `rows` <= 8 rows.
FewRowsQ8 pack_few_rows_q8(const TileQ8* tiles, int64_t rows, int64_t blocks);

// Whether this kernel level multiplies FewRowsQ8 (AVX-512 VNNI only; the
// other levels run A through the tiles).
bool few_rows_q8_available();

// t [x.n, t_stride]: row u's first w.rows values = W x_u, bitwise the tiles'
// dot_rows_batch. x: whole rows (x.index null) of w.blocks blocks.
void few_rows_q8_batch(const FewRowsQ8& w, const Q8Rows& x, float* t, int64_t t_stride);

}  // namespace shamn
