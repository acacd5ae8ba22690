#pragma once
// Row gather and scatter-add (embedding lookups and their gradients).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/key_groups.h"
#include "core/parallel.h"
#include "core/prefetch.h"

namespace shamn {

// Checks every index is in [0, num_rows); names the first bad one.
inline void check_row_indices(const int32_t* idx, int64_t n, int64_t num_rows, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    SHAMN_CHECK(idx[i] >= 0 && idx[i] < num_rows, what, ": index ", idx[i], " at position ", i,
                " is outside [0, ", num_rows, ")");
}

// out[i, :] = table[idx[i], :]   table: [R, D]  idx: [N] int32  out: [N, D]
// Rows come in index order, not memory order: each next row is requested ahead
// (core/prefetch.h), here and in scatter_add_rows.
template <class T>
void gather_rows_forward(T* out, const T* table, const int32_t* idx, int64_t n, int64_t dim) {
  parallel_for(0, n, row_grain(dim), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (i + 1 < hi) prefetch_span(table + static_cast<int64_t>(idx[i + 1]) * dim, dim);
      std::memcpy(out + i * dim, table + static_cast<int64_t>(idx[i]) * dim,
                  sizeof(T) * static_cast<size_t>(dim));
    }
  });
}

// dst[idx[i], :] += src[i, :]   src: [N, D]  idx: [N] int32  dst: [R, D]
// Positions are grouped by destination row (key_groups.h), and each destination
// row adds its sources in increasing position order, in parallel over destination
// rows: no atomics, and the same sums for any thread count. With overwrite, dst
// holds nothing yet: each row is zeroed as its turn comes (while it is in cache,
// not in a pass of its own over dst) and then added into, the same bits.
template <class T>
void scatter_add_rows(T* dst, const T* src, const int32_t* idx, int64_t n, int64_t num_rows, int64_t dim,
                      bool overwrite = false) {
  const KeyGroups by_row = group_by_key(n, num_rows, [idx](int64_t i) { return int64_t{idx[i]}; });
  const std::vector<int64_t>& start = by_row.start;
  parallel_for(0, num_rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* d = dst + r * dim;
      if (overwrite) std::fill_n(d, dim, T(0));
      for (int64_t k = start[r]; k < start[r + 1]; ++k) {
        if (k + 1 < start[hi]) prefetch_span(src + by_row.order[k + 1] * dim, dim);
        const T* s = src + by_row.order[k] * dim;
        for (int64_t c = 0; c < dim; ++c) d[c] += s[c];
      }
    }
  });
}

}  // namespace shamn
