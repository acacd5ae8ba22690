#pragma once
// Long reductions with few outputs: a weight gradient summed over tens of
// thousands of tokens into a small matrix. Their serial form walks fixed chunks
// of the reduction in order, each chunk adding its own sum into the destination:
//   for c in chunks: dst = dst + (sum over chunk c)
// When the destination has too few tiles to share between threads, the chunks
// are the parallel work instead: each chunk's sum goes to a partial array, and
// the partials are then added into the destination in chunk order. Every
// element sees the same additions in the same order as in the serial form, so
// the bits are the same (at any thread count, and against the serial form).
#include <algorithm>
#include <cstdint>

#include "core/buffer.h"
#include "core/parallel.h"

namespace shamn {

// At most this many values of partial arrays are held at once (16 MiB of
// floats); more chunks than fit run in waves.
inline constexpr int64_t kChunkFoldFloats = int64_t{1} << 22;

// The destination is rows x cols values of T.
//   partial(c, out): writes chunk c's sum, rows x cols values, densely to out;
//   fold(c, in, row_lo, row_hi): adds chunk c's partial `in` into the destination's
//     rows [row_lo, row_hi) (chunk 0 may apply the caller's first-chunk rule, such as
//     a GEMM's beta).
template <class T, class Partial, class Fold>
void fold_chunks_in_order(int64_t chunks, int64_t rows, int64_t cols, Partial&& partial, Fold&& fold) {
  if (chunks <= 0 || rows <= 0 || cols <= 0) return;
  const int64_t size = rows * cols;
  const int64_t wave = std::clamp<int64_t>(kChunkFoldFloats / size, 1, chunks);
  Buffer<T> partials(wave * size);
  for (int64_t c0 = 0; c0 < chunks; c0 += wave) {
    const int64_t count = std::min(wave, chunks - c0);
    // About 16K additions per fold task; a task's rows stay in L2 while every partial passes.
    const int64_t row_grain = std::max<int64_t>(1, (int64_t{1} << 14) / (cols * count));
    parallel_for(0, count, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) partial(c0 + c, partials.data() + c * size);
    });
    parallel_for(0, rows, row_grain, [&](int64_t lo, int64_t hi) {
      for (int64_t c = 0; c < count; ++c) fold(c0 + c, partials.data() + c * size, lo, hi);
    });
  }
}

}  // namespace shamn
