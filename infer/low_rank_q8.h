#pragma once
// The factors of a quantised LoRA adapter (infer/lora_adapter.h) in a layout
// for their shapes: A [r, in] has few rows, B [out, r] few columns, and both
// multiply one activation row at a time. In the runtime's tiles of 16 rows
// A wasted half of every tile at rank 8 and each tiny product paid the batched
// kernel's set-up, and f32 B cost an adapted expert more than its whole int8
// base product; here each 4 quantised input values meet 8 rows' weights in one
// vpdpbusd, with nothing to set up.
//
// W [rows, cols] as q8 blocks of 32 values along each row (the BlockQ8 of
// infer/quant_blocks.h, moved): for chunk c of 8 rows and group g of 4
// columns, 32 bytes, row c*8 + lane's 4 weights side by side. Only groups that
// hold columns are stored (rank 8: 2 groups). Scales d[c][j][lane]: row c*8 +
// lane's block j.
//
// The result is pinned down as the quantised dot products are (infer/quant_dot.h):
// per row, acc = fma(x[j].d * d[row][j], float(isum_j), acc) over blocks j
// from 0, then y = fma(c, acc, y): every kernel level gives the same bits.
#include <cstdint>

#include "core/buffer.h"
#include "infer/quant_blocks.h"

namespace shamn {

struct LowRankQ8 {
  static constexpr int64_t kChunk = 8;  // rows per chunk
  static constexpr int64_t kGroup = 4;  // columns per 32-bit lane
  int64_t rows = 0, cols = 0;
  int64_t groups = 0;     // groups of 4 columns over all blocks: a chunk's values are groups * 32 bytes
  Buffer<int8_t> packed;  // [chunks, groups, kChunk, kGroup]
  Buffer<float> d;        // [chunks, blocks, kChunk]; 0 past `rows`

  int64_t chunks() const { return (rows + kChunk - 1) / kChunk; }
  int64_t blocks() const { return quant_blocks(cols); }
  // Groups of 4 in block j: its columns rounded up to whole groups.
  int64_t groups_in_block(int64_t j) const {
    const int64_t values = cols - j * kQuantBlock < kQuantBlock ? cols - j * kQuantBlock : kQuantBlock;
    return (values + kGroup - 1) / kGroup;
  }
};

// w: [rows, quant_blocks(cols)] row-major q8 blocks.
LowRankQ8 pack_low_rank_q8(const BlockQ8* w, int64_t rows, int64_t cols);

// y [rows] += c * W x for rows [r0, r1) (r0 a multiple of kChunk), x [cols]
// quantised (quant_blocks(cols) blocks).
void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, float c, float* y, int64_t r0, int64_t r1);
inline void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, float c, float* y) {
  low_rank_add_q8(w, x, c, y, 0, w.rows);
}

}  // namespace shamn
