#pragma once
// Internal to the runtime's forward: a layer's weight products over a batch of
// activation rows (int8/int4 tiles on quantised rows, or f32), with the bias
// and an adapter's LoRA term added where the outputs are still in cache.
#include <cstdint>

#include "infer/lora_term.h"
#include "infer/model_parts.h"
#include "infer/quant_rows.h"

namespace shamn::forward_detail {

// y[t] = W x[t] + bias for t < n. x: [n, in]  xq: x quantised (quantize_rows
// with segment 0; read only when W is quantised)  y: [n, out]. Tasks take
// tiles of 16 weight rows and multiply every token by them at once, so a tile
// is read from memory once per call.
void dense_product(const Dense& L, const float* x, const QuantRows* xq, int64_t n, float* y,
                   const LoraTerm* lora = nullptr);

// dense_product, quantising x itself.
void dense_forward(const Dense& L, const float* x, int64_t n, float* y);

// y[t] = W x[t] + bias for a block-sparse W, t < n (accumulate: y[t] += that).
// Quantised W: x row t is xq row rows[t] (or t), quantised per b-value segment
// (quantize_rows with segment b). f32 W: x [n, in]. y: [n, out].
void block_sparse_product(const BlockSparse& L, const float* x, const QuantRows* xq, const int32_t* rows,
                          int64_t n, float* y, const LoraTerm* lora = nullptr, bool accumulate = false);

// xq when a block-sparse product quantised its input in segments of whole
// quantisation blocks (the same bytes as whole rows, which a LoRA factor
// reads), else null.
const QuantRows* whole_blocks(const BlockSparse& L, const QuantRows& xq);

}  // namespace shamn::forward_detail
