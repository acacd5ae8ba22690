#include "autograd/ops_dropout.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/check.h"
#include "core/kernels/philox_span.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace shamn {

namespace {

// Words below this keep their element: (1 - p) * 2^32, rounded, at most
// 2^32 - 1 (a p under 2^-33 then drops one word value in 2^32).
uint32_t keep_below(double p) {
  return static_cast<uint32_t>(std::min<long long>(std::llround((1.0 - p) * 4294967296.0), 0xFFFFFFFFll));
}

// out[i] = x[i] * (factor where element i is kept, else 0) (kAdd: out[i] +=
// that; a product rather than a choice, so NaN and inf stay what they are, as
// in PyTorch, and the loop has no branch to mispredict); a span of 64 elements
// at a time (one philox_span, words in element order), tasks of whole spans,
// so any thread count draws the same.
template <bool kAdd, class T>
void apply_mask(T* out, const T* x, int64_t n, uint32_t below, T factor, const DropoutKey& key) {
  constexpr int64_t kChunk = 4096;  // elements a task, a multiple of kPhiloxSpanWords
  parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t lo, int64_t hi) {
    alignas(64) uint32_t words[kPhiloxSpanWords];
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t at = c * kChunk; at < end; at += kPhiloxSpanWords) {
        philox_span(static_cast<uint64_t>(at / kPhiloxSpanWords) * kPhiloxSpanBlocks, key.stream, key.seed,
                    words);
        const int64_t count = std::min<int64_t>(kPhiloxSpanWords, end - at);
        T* __restrict o = out + at;
        const T* __restrict xs = x + at;
        for (int64_t e = 0; e < count; ++e) {
          const T kept = xs[e] * (static_cast<T>(words[e] < below) * factor);
          if constexpr (kAdd)
            o[e] += kept;
          else
            o[e] = kept;
        }
      }
    }
  });
}

}  // namespace

bool dropout_keeps(double p, const DropoutKey& key, uint64_t i) {
  const uint64_t span = i / kPhiloxSpanWords, e = i % kPhiloxSpanWords;
  const uint64_t block = span * kPhiloxSpanBlocks + e % kPhiloxSpanBlocks;
  return philox4x32(block, key.stream, key.seed)[e / kPhiloxSpanBlocks] < keep_below(p);
}

Var dropout(const Var& x, double p, const DropoutKey& key) {
  SHAMN_CHECK(p >= 0 && p < 1, "dropout: p must lie in [0, 1), got ", p);
  if (p == 0) return x;
  const ProfileScope profile("dropout", ProfileCategory::forward);
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  record_work(op_work::scale(x.numel(), s));
  const uint32_t below = keep_below(p);
  const double factor = 1.0 / (1.0 - p);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    apply_mask<false>(out.data<T>(), x.value().data<T>(), x.numel(), below, static_cast<T>(factor), key);
  });
  return record("dropout", out, {x}, [below, factor, key, s](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::scale(n.out_grad.numel(), s));
    // The mask covers every element, so a gradient nothing has reached yet is
    // written, not zero-filled and then added to.
    bool fresh = false;
    Tensor& dx = n.input_grad_to_write(0, &fresh);
    dispatch_floating(n.out_dtype, "dropout", [&](auto zero) {
      using T = decltype(zero);
      if (fresh)
        apply_mask<false>(dx.data<T>(), n.out_grad.data<T>(), n.out_grad.numel(), below,
                          static_cast<T>(factor), key);
      else
        apply_mask<true>(dx.data<T>(), n.out_grad.data<T>(), n.out_grad.numel(), below,
                         static_cast<T>(factor), key);
    });
  });
}

}  // namespace shamn
