#pragma once
// A matrix with few columns in int8, laid out for its shape: a quantised LoRA
// adapter's B [out, r] (infer/lora_adapter.h), which multiplies t = A x, r
// values, into every output. As f32 columns B cost r multiply-adds per output
// at 16 lanes, more than the int8 base product of a 75%-sparse expert it
// adapts; the runtime's tiles would pad each row's r values to a block of 32.
// Here each 4 quantised values of t meet 8 rows' weights in one vpdpbusd, and
// with one block of columns (r <= 32) t's groups are broadcast once per row.
// With many rows of x, AVX-512 takes 16 rows of W a register (two chunks) and
// keeps a tile of W's chunks in registers across the rows. (A [r, in] keeps the
// runtime's tiles, experiments/bench/bench_low_rank.cpp measured this layout no
// faster for it, and at rank <= 8 a layout of its own for batched rows:
// infer/few_rows_q8.h.)
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

// The right-hand side of low_rank_add_q8: n quantised rows, and the rows of y they add into.
struct LowRankInput {
  const BlockQ8* x = nullptr;
  const int32_t* sums = nullptr;
  int64_t stride = 0, n = 0;
  const int32_t* y_rows = nullptr;
  int64_t y_row(int64_t t) const { return y_rows ? y_rows[t] : t; }
};

// w: [rows, quant_blocks(cols)] row-major q8 blocks.
LowRankQ8 pack_low_rank_q8(const BlockQ8* w, int64_t rows, int64_t cols);

// y[y_rows ? y_rows[t] : t] [w.rows] += c * W x[t] for t < n, W's rows [r0, r1)
// (r0 a multiple of kChunk). x: n quantised rows of `stride` blocks (the
// first quant_blocks(cols) are read); sums: each block's sum of values, laid
// out as x (what the VNNI path needs to undo its unsigned offset). y: rows of
// y_stride floats.
void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, const int32_t* sums, int64_t stride, int64_t n,
                     const int32_t* y_rows, float c, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// One row: y [w.rows] += c * W x.
void low_rank_add_q8(const LowRankQ8& w, const BlockQ8* x, const int32_t* sums, float c, float* y);

// sums[j] = the sum of block j's values, j < blocks.
void q8_block_sums(const BlockQ8* x, int64_t blocks, int32_t* sums);

}  // namespace shamn
