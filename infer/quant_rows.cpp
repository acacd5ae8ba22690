#include "infer/quant_rows.h"

#include "core/parallel.h"
#include "infer/low_rank_q8.h"
#include "infer/model_parts.h"

namespace shamn::forward_detail {

int64_t quant_row_blocks(int64_t in, int64_t segment) {
  const int64_t seg = segment > 0 ? segment : in;
  return in / seg * quant_blocks(seg);
}

void quantize_rows_range(QuantRows& xq, const float* x, int64_t t0, int64_t t1, int64_t in, int64_t segment) {
  const int64_t seg = segment > 0 ? segment : in, bpr = quant_row_blocks(in, segment);
  if (seg % kQuantBlock == 0 && in % kQuantBlock == 0) {
    // Rows of whole blocks lie end to end in x and in xq: one call quantises
    // them all (the same bytes; the kernel overlaps one group of blocks' scales
    // with the previous group's values, which one call per row cannot).
    quantize_row_q8_sums(x + t0 * in, xq.q.data() + t0 * bpr, xq.sums.data() + t0 * bpr, (t1 - t0) * in);
    return;
  }
  for (int64_t t = t0; t < t1; ++t) {
    BlockQ8* row = xq.q.data() + t * bpr;
    // Segments that are whole quantisation blocks quantise as one row (the same bytes, one call).
    if (seg % kQuantBlock == 0) {
      quantize_row_q8_sums(x + t * in, row, xq.sums.data() + t * bpr, in);
    } else {
      for (int64_t s = 0; s < in / seg; ++s)
        quantize_row_q8(x + t * in + s * seg, row + s * quant_blocks(seg), seg);
      q8_block_sums(row, bpr, xq.sums.data() + t * bpr);
    }
  }
}

QuantRows alloc_quant_rows(int64_t n, int64_t in, int64_t segment) {
  const int64_t bpr = quant_row_blocks(in, segment);
  return QuantRows{Buffer<BlockQ8>(n * bpr), Buffer<int32_t>(n * bpr)};
}

QuantRows quantize_rows(const float* x, int64_t n, int64_t in, int64_t segment) {
  QuantRows xq = alloc_quant_rows(n, in, segment);
  parallel_for(0, n, grain_for(in),
               [&](int64_t lo, int64_t hi) { quantize_rows_range(xq, x, lo, hi, in, segment); });
  return xq;
}

}  // namespace shamn::forward_detail
