#include "autograd/ops_dropout.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/check.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "core/rng.h"

namespace shamn {

namespace {

// Words below this keep their element: (1 - p) * 2^32, in 64 bits so p = 0
// keeps every word.
uint64_t keep_below(double p) { return static_cast<uint64_t>(std::llround((1.0 - p) * 4294967296.0)); }

// out[i] = x[i] * factor where element i is kept, else 0 (kAdd: out[i] += that);
// over whole Philox blocks of 4 elements, in chunks of them, so any thread count
// draws the same.
template <bool kAdd, class T>
void apply_mask(T* out, const T* x, int64_t n, uint64_t below, T factor, const DropoutKey& key) {
  constexpr int64_t kChunk = 4096;  // elements a task, a multiple of 4
  parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; i += 4) {
        const std::array<uint32_t, 4> w = philox4x32(static_cast<uint64_t>(i / 4), key.stream, key.seed);
        for (int64_t j = 0; j < 4 && i + j < end; ++j) {
          const T kept = w[static_cast<size_t>(j)] < below ? x[i + j] * factor : T(0);
          if constexpr (kAdd)
            out[i + j] += kept;
          else
            out[i + j] = kept;
        }
      }
    }
  });
}

}  // namespace

bool dropout_keeps(double p, const DropoutKey& key, uint64_t i) {
  return philox4x32(i / 4, key.stream, key.seed)[i % 4] < keep_below(p);
}

Var dropout(const Var& x, double p, const DropoutKey& key) {
  SHAMN_CHECK(p >= 0 && p < 1, "dropout: p must lie in [0, 1), got ", p);
  if (p == 0) return x;
  const ProfileScope profile("dropout", ProfileCategory::forward);
  const int64_t s = static_cast<int64_t>(dtype_size(x.dtype()));
  record_work(op_work::scale(x.numel(), s));
  const uint64_t below = keep_below(p);
  const double factor = 1.0 / (1.0 - p);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    apply_mask<false>(out.data<T>(), x.value().data<T>(), x.numel(), below, static_cast<T>(factor), key);
  });
  return record("dropout", out, {x}, [below, factor, key, s](Node& n) {
    if (!n.needs_grad(0)) return;
    record_work(op_work::scale(n.out_grad.numel(), s));
    dispatch_floating(n.out_dtype, "dropout", [&](auto zero) {
      using T = decltype(zero);
      apply_mask<true>(n.input_grad(0).data<T>(), n.out_grad.data<T>(), n.out_grad.numel(), below,
                       static_cast<T>(factor), key);
    });
  });
}

}  // namespace shamn
