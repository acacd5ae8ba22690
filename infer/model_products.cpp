#include "infer/model_products.h"

#include <algorithm>
#include <vector>

#include "core/buffer.h"
#include "core/parallel.h"
#include "infer/low_rank_q8.h"
#include "infer/quant_tiles.h"

namespace shamn::forward_detail {
namespace {

// y [n, out] += bias [out] (null: nothing): the bias of a product whose
// kernel could not take it in its epilogue (f32 weights, or a LoRA term to add
// first). A pass of its own after the product: added right behind the
// kernel's masked stores, every load of y waited for them (a store-forwarding
// stall per row block).
void add_bias(float* y, const float* bias, int64_t n, int64_t out) {
  if (bias == nullptr) return;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < out; ++i) y[t * out + i] += bias[i];
}

// A LoRA term added behind the product, over spans of whole row tiles whose
// outputs for all n rows of input reach kSpanFloats (32 KiB; under twice that,
// about an L1's worth): a decode step's 16 streams take one low-rank call for
// all of a task's rows, a prefill's 512 tokens one per tile as before. One call
// per 32-row tile in decode spent more in each call's set-up than in its 4
// chunks (perf of `bench --streams 16` with a rank-8 int8 adapter:
// low_rank_add_q8 10% of the samples, 7% by spans). Every output gets the same
// term, so the same bits.
class LoraSpans {
 public:
  LoraSpans(const LoraTerm* lora, float* y, int64_t y_stride, int64_t n, int64_t begin)
      : lora_(lora && *lora ? lora : nullptr), y_(y), y_stride_(y_stride), n_(n), begin_(begin) {}
  // Rows [begin, end) of y are final: add the term once they make a span.
  void rows_done(int64_t end) {
    if (lora_ && (end - begin_) * n_ >= kSpanFloats) flush(end);
  }
  void flush(int64_t end) {
    if (lora_ && end > begin_) lora_->add(y_, y_stride_, begin_, end);
    begin_ = end;
  }

 private:
  static constexpr int64_t kSpanFloats = 8192;
  const LoraTerm* lora_;
  float* y_;
  int64_t y_stride_, n_, begin_;
};

}  // namespace

void dense_product(const Dense& L, const float* x, const QuantRows* xq, int64_t n, float* y,
                   const LoraTerm* lora) {
  const WeightMatrix& W = L.w;
  const int64_t in = W.cols, out = W.rows, bpr = W.blocks_per_row();
  // Quantised weights: the kernel adds the bias itself, and a LoRA term goes
  // onto its results, (W x + bias) + term.
  const bool fused = W.quantized();
  parallel_for(0, row_tiles(out), grain_for(kTileRows * in * n), [&](int64_t lo, int64_t hi) {
    LoraSpans term(lora, y, out, n, lo * kTileRows);
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t r0 = c * kTileRows, rn = std::min(kTileRows, out - r0);
      if (W.quantized())
        W.dot_rows_batch(r0, rn, Q8Rows{xq->q.data(), n, bpr, nullptr, nullptr, xq->sums.data()}, y + r0, out,
                         TileEpilogue{fused && L.bias ? L.bias + r0 : nullptr});
      else
        for (int64_t t = 0; t < n; ++t) W.dot_rows(r0, rn, InputRow{x + t * in, nullptr}, y + t * out + r0);
      term.rows_done(r0 + rn);
    }
    term.flush(std::min(out, hi * kTileRows));
  });
  if (!fused) add_bias(y, L.bias, n, out);
}

void dense_forward(const Dense& L, const float* x, int64_t n, float* y) {
  const QuantRows xq = L.w.quantized() ? quantize_rows(x, n, L.w.cols, 0) : QuantRows();
  dense_product(L, x, &xq, n, y);
}

void block_sparse_product(const BlockSparse& L, const float* x, const QuantRows* xq, const int32_t* rows,
                          int64_t n, float* y, const LoraTerm* lora, bool accumulate) {
  const WeightMatrix& W = L.values;
  const int64_t b = L.block, a = L.active, nib = L.in / b, nob = L.out / b, sb = L.segment_blocks();
  // Quantised weights: the kernel adds the bias (and, accumulating, the result
  // to y) itself, and a LoRA term goes onto y after it: (y + (W x + bias)) +
  // term. In a prefill's 2,048 rows the term's old place, between the product
  // and the bias, cost three passes over [n, out] (scratch, bias, sum into y).
  const bool fused = W.quantized();
  // Without the kernel's epilogue the product goes to scratch, biased, then added.
  Buffer<float> scratch(accumulate && !fused ? n * L.out : 0);
  float* out = accumulate && !fused ? scratch.data() : y;
  const bool lora_in_pass = lora && *lora && b % LowRankQ8::kChunk == 0;
  parallel_for(0, nob, grain_for(b * a * b * n), [&](int64_t lo, int64_t hi) {
    LoraSpans term(lora_in_pass ? lora : nullptr, out, L.out, n, lo * b);
    // On the stack for the usual few active blocks: this runs once per call in a decode step.
    constexpr int64_t kStackIndex = 64;
    int32_t index_stack[kStackIndex];
    std::vector<int32_t> index_heap(a * sb > kStackIndex ? static_cast<size_t>(a * sb) : 0);
    int32_t* index = a * sb > kStackIndex ? index_heap.data() : index_stack;
    std::vector<float> gf(W.quantized() ? 0 : static_cast<size_t>(a * b));
    for (int64_t r = lo; r < hi; ++r) {
      const int32_t* cols = L.col_index + r * a;
      if (W.quantized()) {
        // Row block r multiplies its a input segments where they lie (Q8Rows' index).
        for (int64_t m = 0; m < a; ++m)
          for (int64_t s = 0; s < sb; ++s) index[m * sb + s] = static_cast<int32_t>(cols[m] * sb + s);
        const TileEpilogue e =
            fused ? TileEpilogue{L.bias ? L.bias + r * b : nullptr, accumulate} : TileEpilogue{};
        W.dot_rows_batch(r * b, b, Q8Rows{xq->q.data(), n, nib * sb, index, rows, xq->sums.data()},
                         out + r * b, L.out, e);
      } else {
        for (int64_t t = 0; t < n; ++t) {
          // The a input segments row block r reads, gathered side by side.
          for (int64_t m = 0; m < a; ++m) std::copy_n(x + t * L.in + cols[m] * b, b, gf.data() + m * b);
          W.dot_rows(r * b, b, InputRow{gf.data(), nullptr}, out + t * L.out + r * b);
        }
      }
      term.rows_done((r + 1) * b);
    }
    term.flush(hi * b);
  });
  // Row blocks narrower than the low-rank kernel's chunk take the term after the product.
  if (lora && *lora && !lora_in_pass) lora->add(out, L.out, 0, L.out);
  if (fused) return;
  add_bias(out, L.bias, n, L.out);
  if (accumulate)
    for (int64_t i = 0; i < n * L.out; ++i) y[i] += out[i];
}

const QuantRows* whole_blocks(const BlockSparse& L, const QuantRows& xq) {
  return L.values.quantized() && L.block % kQuantBlock == 0 ? &xq : nullptr;
}

}  // namespace shamn::forward_detail
