#pragma once
// Integer dot products over quantisation blocks (infer/quant_blocks.h), the
// inner loop of the quantised runtime. Each block's 32 products are summed in
// int32 (exact), then scaled by the two block scales in float.
//
// Three paths compute the same thing: portable scalar, AVX2 and AVX-512 VNNI.
// They give bitwise-equal results because the float part is pinned down:
// block i is added into accumulator lane i % 8 as
//   lane = fma(a[i].d * b[i].d, float(isum_i), lane)
// and the eight lanes are summed left to right at the end. The SIMD paths
// keep the eight lanes in one register; only the integer work differs.
//
// The path is the process's kernel level (core/kernel_level.h), through the
// per-type table of infer/quant_kernels.h.
#include <cstdint>

#include "infer/quant_blocks.h"

namespace shamn {

// a, b: [blocks]
float dot_q8_q8(const BlockQ8* a, const BlockQ8* b, int64_t blocks);
// w: [blocks]  x: [blocks]
float dot_q4_q8(const BlockQ4* w, const BlockQ8* x, int64_t blocks);

// W: [rows, blocks_per_row]  x: [blocks_per_row]  y: [rows]
// y[r] = dot(W[r], x) on the calling thread, one kernel dispatch for all rows:
// the runtime's building block (it splits work across threads itself).
void dot_rows_q8(const BlockQ8* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);
void dot_rows_q4(const BlockQ4* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);

// The same with rows split over shamn::parallel_for, one row per output.
void matvec_q8(const BlockQ8* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);
void matvec_q4(const BlockQ4* W, int64_t rows, int64_t blocks_per_row, const BlockQ8* x, float* y);

}  // namespace shamn
