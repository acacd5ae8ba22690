#pragma once
// Internal to the runtime's forward: the LoRA term of an adapted product,
// computed beside the base product and added into its outputs by spans of
// tiles, while they are in cache (experiments/lora.md).
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "infer/lora_adapter.h"
#include "infer/model_parts.h"
#include "infer/quant_rows.h"

namespace shamn::forward_detail {

// The input of an adapted product: op row i reads x[x_rows ? x_rows[i] : i]
// ([.., in] f32) and, when the base product quantised it in whole-row blocks,
// xq's row of the same index.
struct LoraInput {
  const float* x = nullptr;
  int64_t in = 0;
  const QuantRows* xq = nullptr;
  const int32_t* x_rows = nullptr;
};

// The LoRA term of one adapted product of n op rows: y[i] += (alpha / r) B (A x_i)
// for each row i whose adapter adapts the matrix (pick(its LoraLayer) is not
// null; row i's adapter is ad.of_row[tokens ? tokens[i] : i]). A x_i is
// computed when the term is made, from the activations the base product
// quantised (no second quantisation or gather); the base product adds B's part
// by spans of tiles (add), while their outputs are in cache. An int8 adapter
// runs both factors in int8 (infer/low_rank_q8.h), a f32 one B as r axpys.
class LoraTerm {
 public:
  // pick(adapter's LoraLayer) gives its factors for this matrix, or null.
  template <class Pick>
  LoraTerm(const Adapters& ad, size_t l, Pick pick, const LoraInput& in, const int32_t* tokens, int64_t n) {
    if (ad.of_row == nullptr) return;
    constexpr size_t kOnStack = 8;  // adapters in a batch, usually a few
    const LoraFactors* on_stack[kOnStack];
    std::vector<const LoraFactors*> on_heap(ad.list.size() > kOnStack ? ad.list.size() : 0);
    const LoraFactors** picked = on_heap.empty() ? on_stack : on_heap.data();
    for (size_t a = 0; a < ad.list.size(); ++a) picked[a] = pick(ad.list[a]->layer(l));
    build(ad, picked, in, tokens, n);
  }
  LoraTerm(const LoraTerm&) = delete;

  explicit operator bool() const { return groups_ > 0 && offsets_[groups_] > 0; }

  // Outputs [o0, o1) of every adapted row += its term (o0 a multiple of
  // LowRankQ8::kChunk); y: [n, y_stride], op row i at y + i * y_stride.
  void add(float* y, int64_t y_stride, int64_t o0, int64_t o1) const;

 private:
  // An adapter with at least this many rows in a product runs A batched.
  static constexpr int64_t kBatchedRows = 4;

  // t of the k-th adapted row (of rank r), quantised for B's int8 product.
  void quantize_t(int64_t k, int64_t r) const;
  // The term from each adapter's factors for this matrix (picked[a], or null).
  void build(const Adapters& ad, const LoraFactors* const* picked, const LoraInput& in, const int32_t* tokens,
             int64_t n);

  Buffer<float> arena_;
  int64_t groups_ = 0;                     // the batch's adapters (A)
  const LoraFactors** factors_ = nullptr;  // [A] each adapter's factors for this matrix, or null
  int32_t* offsets_ = nullptr;             // [A + 1] adapter a's rows are rows_[offsets_[a], offsets_[a+1])
  int32_t* rows_ = nullptr;                // op rows, grouped by adapter
  int64_t r_stride_ = 0, tb_ = 0;          // the largest rank, its quantisation blocks
  float* t_ = nullptr;                     // [n, r_stride] A x of the k-th adapted row (rows_[k])
  BlockQ8* tq_ = nullptr;                  // [n, tb] those quantised (int8 adapters)
  int32_t* tq_sums_ = nullptr;             // [n, tb] their block sums
};

}  // namespace shamn::forward_detail
