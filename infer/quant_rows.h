#pragma once
// Internal to the runtime's forward: activation rows quantised once for all
// the weight tiles that read them.
#include <cstdint>

#include "core/buffer.h"
#include "infer/quant_blocks.h"

namespace shamn::forward_detail {

// Activation rows quantised for the products: q [n, blocks per row] and each
// block's sum of values (Q8Rows::sums), computed once instead of per weight tile.
struct QuantRows {
  Buffer<BlockQ8> q;
  Buffer<int32_t> sums;
  const BlockQ8* data() const { return q.data(); }
};

// Blocks of one row of `in` values quantised in segments of `segment` (0 = whole rows).
int64_t quant_row_blocks(int64_t in, int64_t segment);

// Rows [t0, t1) of x [., in] into xq (allocated for them): each row quantised
// in segments of `segment` values (0 = whole rows), the blocking of the
// matrices that read it.
void quantize_rows_range(QuantRows& xq, const float* x, int64_t t0, int64_t t1, int64_t in, int64_t segment);

QuantRows alloc_quant_rows(int64_t n, int64_t in, int64_t segment);

// x: [n, in] -> [n, quant_blocks per row], as quantize_rows_range.
QuantRows quantize_rows(const float* x, int64_t n, int64_t in, int64_t segment);

}  // namespace shamn::forward_detail
