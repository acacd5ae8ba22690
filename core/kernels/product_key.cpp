#include "core/kernels/product_key.h"

#include "core/check.h"
#include "core/gemm.h"
#include "core/parallel.h"

namespace shamn {

void check_product_key_dims(const ProductKeyDims& d) {
  SHAMN_CHECK(d.n >= 1, "product-key memory: ", d.n, " keys per half; need at least 1");
  SHAMN_CHECK(d.k >= 1 && d.k <= d.n, "product-key memory: topk = ", d.k,
              " must be in [1, n] with n = ", d.n, " keys per half (memory.size = n^2 = ",
              d.n * d.n, ")");
  SHAMN_CHECK(d.dh >= 1, "product-key memory: key_dim = 2*dh needs dh >= 1, got dh = ", d.dh);
  SHAMN_CHECK(d.dim >= 1, "product-key memory: value width ", d.dim, " must be positive");
  SHAMN_CHECK(d.n <= 46340, "product-key memory: ", d.n, "^2 slots do not fit int32 slot ids");
}

namespace {

// Score tiles: about 1 MiB of s1 + s2 per tile, so they are still in cache when the
// selection reads them back, and memory stays bounded for any N.
constexpr int64_t kScoreTileFloats = 1 << 17;
// Tokens per task in the per-token loops: roughly 16K multiply-adds each.
int64_t token_grain(const ProductKeyDims& d) {
  return std::max<int64_t>(1, 16384 / (2 * d.n + d.k * d.dim));
}

inline bool ranks_above(float sa, int32_t ia, float sb, int32_t ib) {
  return sa > sb || (sa == sb && ia < ib);
}

// A bounded heap of the best `size` (score, id) entries seen so far, with the worst
// at the root, so a newcomer is compared with the root only. Hand-written sifts keep
// every access in bounds whatever the scores are.
struct Heap {
  float* s;
  int32_t* id;

  void swap(int64_t a, int64_t b) {
    std::swap(s[a], s[b]);
    std::swap(id[a], id[b]);
  }
  // Restores the heap below `pos` for the first `size` entries.
  void sift_down(int64_t pos, int64_t size) {
    for (;;) {
      int64_t worst = pos;
      for (int64_t c = 2 * pos + 1; c <= 2 * pos + 2 && c < size; ++c)
        if (ranks_above(s[worst], id[worst], s[c], id[c])) worst = c;
      if (worst == pos) return;
      swap(pos, worst);
      pos = worst;
    }
  }
  void heapify(int64_t size) {
    for (int64_t p = size / 2 - 1; p >= 0; --p) sift_down(p, size);
  }
  void replace_root(float score, int32_t index, int64_t size) {
    s[0] = score;
    id[0] = index;
    sift_down(0, size);
  }
  // Heap sort: moving the worst to the back each time leaves the entries best first.
  void sort_best_first(int64_t size) {
    for (int64_t end = size - 1; end > 0; --end) {
      swap(0, end);
      sift_down(0, end);
    }
  }
};

// The k best of one score row, best first (ranked scores, key indices).
void top_k_row(const float* score, int64_t n, int64_t k, float* best, int32_t* index) {
  Heap heap{best, index};
  for (int64_t i = 0; i < k; ++i) {
    best[i] = product_key_rank_score(score[i]);
    index[i] = static_cast<int32_t>(i);
  }
  heap.heapify(k);
  // Indices arrive ascending, so a score equal to the root's loses the tie: only a
  // strictly higher score gets in.
  for (int64_t i = k; i < n; ++i) {
    const float v = product_key_rank_score(score[i]);
    if (v > best[0]) heap.replace_root(v, static_cast<int32_t>(i), k);
  }
  heap.sort_best_first(k);
}

struct SelectScratch {
  std::vector<float> a, c;
  std::vector<int32_t> I, J;
  explicit SelectScratch(int64_t k)
      : a(static_cast<size_t>(k)), c(static_cast<size_t>(k)), I(static_cast<size_t>(k)),
        J(static_cast<size_t>(k)) {}
};

// One token: top-k of s1 and s2, the top k of the k*k candidate sums, the softmax.
// Both lists are sorted, so a_p + c_r does not increase along r, nor a_p + c_0 along
// p (float addition is monotonic): a row stops at the first sum strictly below the
// k-th best so far, and the whole scan stops when that happens at r = 0. Equal sums
// are still compared by slot id, so the result is exactly the full sort's. (The
// textbook frontier heap over (p, r) would not be: rounding can make a_p + c_r equal
// a_p + c_{r+1} with J_{r+1} < J_r.)
void select_token(int32_t* slots, float* weights, const float* s1, const float* s2,
                  const ProductKeyDims& d, SelectScratch& sc) {
  const int64_t n = d.n, k = d.k;
  top_k_row(s1, n, k, sc.a.data(), sc.I.data());
  top_k_row(s2, n, k, sc.c.data(), sc.J.data());
  Heap heap{weights, slots};  // the outputs double as the candidate heap
  int64_t size = 0;
  for (int64_t p = 0; p < k; ++p) {
    bool row_pruned_at_start = false;
    for (int64_t r = 0; r < k; ++r) {
      const float v = product_key_rank_score(sc.a[p] + sc.c[r]);
      const int32_t slot = static_cast<int32_t>(sc.I[p] * n + sc.J[r]);
      if (size < k) {
        weights[size] = v;
        slots[size] = slot;
        if (++size == k) heap.heapify(k);
        continue;
      }
      if (v < weights[0]) {
        row_pruned_at_start = r == 0;
        break;
      }
      if (ranks_above(v, slot, weights[0], slots[0])) heap.replace_root(v, slot, k);
    }
    if (row_pruned_at_start) break;
  }
  heap.sort_best_first(k);
  const float top = weights[0];
  float total = 0;
  for (int64_t m = 0; m < k; ++m) total += (weights[m] = std::exp(weights[m] - top));
  const float inv = 1.0f / total;
  for (int64_t m = 0; m < k; ++m) weights[m] *= inv;
}

void gather_token(float* out, const float* values, const int32_t* slots, const float* weights,
                  const ProductKeyDims& d) {
  const int64_t D = d.dim;
  const float* v0 = values + static_cast<int64_t>(slots[0]) * D;
  const float w0 = weights[0];
  for (int64_t c = 0; c < D; ++c) out[c] = w0 * v0[c];
  for (int64_t m = 1; m < d.k; ++m) {
    const float* v = values + static_cast<int64_t>(slots[m]) * D;
    const float w = weights[m];
    for (int64_t c = 0; c < D; ++c) out[c] += w * v[c];
  }
}

// dst[rows[e]] += coef[e] * src[t * src_stride : + dim] over the entries e = t*per_token + j,
// j < count[t] (every j when count is null). Entries are grouped by destination row
// with a counting sort and each row adds them in entry order, in parallel over rows:
// the same sums for any thread count (the pattern of rows.h scatter_add_rows).
void scatter_add_scaled_rows(float* dst, int64_t num_rows, int64_t dim, const int32_t* rows,
                             const float* coef, const int32_t* count, int64_t per_token,
                             const float* src, int64_t src_stride, int64_t N) {
  auto entries_of = [&](int64_t t) { return count ? count[t] : per_token; };
  std::vector<int64_t> start(static_cast<size_t>(num_rows) + 1, 0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < entries_of(t); ++j) ++start[rows[t * per_token + j] + 1];
  for (int64_t r = 0; r < num_rows; ++r) start[r + 1] += start[r];
  std::vector<int64_t> order(static_cast<size_t>(start[num_rows]));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < entries_of(t); ++j) {
      const int64_t e = t * per_token + j;
      order[static_cast<size_t>(fill[rows[e]]++)] = e;
    }
  std::vector<int32_t> used;
  for (int64_t r = 0; r < num_rows; ++r)
    if (start[r + 1] > start[r]) used.push_back(static_cast<int32_t>(r));
  if (used.empty()) return;
  const int64_t per_row = std::max<int64_t>(1, start[num_rows] / static_cast<int64_t>(used.size()));
  const int64_t grain = std::max<int64_t>(1, 16384 / (dim * per_row));
  parallel_for(0, static_cast<int64_t>(used.size()), grain, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t r = used[static_cast<size_t>(u)];
      float* out = dst + r * dim;
      for (int64_t i = start[r]; i < start[r + 1]; ++i) {
        const int64_t e = order[static_cast<size_t>(i)];
        const float* s = src + (e / per_token) * src_stride;
        const float w = coef[e];
        for (int64_t c = 0; c < dim; ++c) out[c] += w * s[c];
      }
    }
  });
}

// One token's distinct key rows (slot / n, or slot % n) with their summed dsigma, in
// first-appearance order: d a_p = sum of dsigma over the selected pairs using I_p.
int32_t collect_key_rows(int32_t* rows, float* coef, const int32_t* slots, const float* dsigma,
                         int64_t n, int64_t k, bool first_half) {
  int32_t count = 0;
  for (int64_t m = 0; m < k; ++m) {
    const int32_t row = static_cast<int32_t>(first_half ? slots[m] / n : slots[m] % n);
    int32_t j = 0;
    while (j < count && rows[j] != row) ++j;
    if (j == count) {
      rows[count] = row;
      coef[count++] = dsigma[m];
    } else {
      coef[j] += dsigma[m];
    }
  }
  return count;
}

}  // namespace

void product_key_scores(float* s1, float* s2, const float* q, const float* keys1,
                        const float* keys2, int64_t N, const ProductKeyDims& d) {
  if (N == 0) return;
  gemm(Trans::no, Trans::yes, N, d.n, d.dh, 1.0f, q, 2 * d.dh, keys1, d.dh, 0.0f, s1, d.n);
  gemm(Trans::no, Trans::yes, N, d.n, d.dh, 1.0f, q + d.dh, 2 * d.dh, keys2, d.dh, 0.0f, s2,
       d.n);
}

void product_key_select(int32_t* slots, float* weights, const float* s1, const float* s2,
                        int64_t N, const ProductKeyDims& d) {
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    SelectScratch sc(d.k);
    for (int64_t t = lo; t < hi; ++t)
      select_token(slots + t * d.k, weights + t * d.k, s1 + t * d.n, s2 + t * d.n, d, sc);
  });
}

void product_key_gather(float* out, const float* values, const int32_t* slots,
                        const float* weights, int64_t N, const ProductKeyDims& d) {
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      gather_token(out + t * d.dim, values, slots + t * d.k, weights + t * d.k, d);
  });
}

void product_key_forward(float* out, int32_t* slots, float* weights, const float* q,
                         const float* keys1, const float* keys2, const float* values,
                         int64_t N, const ProductKeyDims& d) {
  check_product_key_dims(d);
  const int64_t tile = std::min(N, std::max<int64_t>(64, kScoreTileFloats / (2 * d.n)));
  std::vector<float> s(static_cast<size_t>(2 * tile * d.n));
  float* s1 = s.data();
  float* s2 = s1 + tile * d.n;
  for (int64_t t0 = 0; t0 < N; t0 += tile) {
    const int64_t tn = std::min(tile, N - t0);
    product_key_scores(s1, s2, q + t0 * 2 * d.dh, keys1, keys2, tn, d);
    parallel_for(0, tn, token_grain(d), [&](int64_t lo, int64_t hi) {
      SelectScratch sc(d.k);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t t = t0 + i;
        select_token(slots + t * d.k, weights + t * d.k, s1 + i * d.n, s2 + i * d.n, d, sc);
        gather_token(out + t * d.dim, values, slots + t * d.k, weights + t * d.k, d);
      }
    });
  }
}

void product_key_backward_scores(float* dsigma, const float* dout, const float* values,
                                 const int32_t* slots, const float* weights, int64_t N,
                                 const ProductKeyDims& d) {
  const int64_t k = d.k, D = d.dim;
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* go = dout + t * D;
      const float* w = weights + t * k;
      float* ds = dsigma + t * k;
      float gbar = 0;
      for (int64_t m = 0; m < k; ++m) {
        const float* v = values + static_cast<int64_t>(slots[t * k + m]) * D;
        float g = 0;
        for (int64_t c = 0; c < D; ++c) g += go[c] * v[c];
        ds[m] = g;
        gbar += w[m] * g;
      }
      for (int64_t m = 0; m < k; ++m) ds[m] = w[m] * (ds[m] - gbar);
    }
  });
}

void product_key_backward_keys(float* dq, float* dkeys1, float* dkeys2, const float* dsigma,
                               const float* q, const float* keys1, const float* keys2,
                               const int32_t* slots, int64_t N, const ProductKeyDims& d) {
  if (!dq && !dkeys1 && !dkeys2) return;
  const int64_t n = d.n, k = d.k, dh = d.dh;
  const size_t nk = static_cast<size_t>(N * k);
  std::vector<int32_t> rows1(nk), rows2(nk), count1(static_cast<size_t>(N)),
      count2(static_cast<size_t>(N));
  std::vector<float> coef1(nk), coef2(nk);
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t e = t * k;
      count1[t] = collect_key_rows(&rows1[e], &coef1[e], slots + e, dsigma + e, n, k, true);
      count2[t] = collect_key_rows(&rows2[e], &coef2[e], slots + e, dsigma + e, n, k, false);
      if (!dq) continue;
      float* dq1 = dq + t * 2 * dh;
      float* dq2 = dq1 + dh;
      for (int32_t j = 0; j < count1[t]; ++j) {
        const float* key = keys1 + static_cast<int64_t>(rows1[e + j]) * dh;
        const float w = coef1[e + j];
        for (int64_t c = 0; c < dh; ++c) dq1[c] += w * key[c];
      }
      for (int32_t j = 0; j < count2[t]; ++j) {
        const float* key = keys2 + static_cast<int64_t>(rows2[e + j]) * dh;
        const float w = coef2[e + j];
        for (int64_t c = 0; c < dh; ++c) dq2[c] += w * key[c];
      }
    }
  });
  if (dkeys1)
    scatter_add_scaled_rows(dkeys1, n, dh, rows1.data(), coef1.data(), count1.data(), k, q,
                            2 * dh, N);
  if (dkeys2)
    scatter_add_scaled_rows(dkeys2, n, dh, rows2.data(), coef2.data(), count2.data(), k,
                            q + dh, 2 * dh, N);
}

void product_key_backward_values(float* dvalues, const float* dout, const int32_t* slots,
                                 const float* weights, int64_t N, const ProductKeyDims& d) {
  scatter_add_scaled_rows(dvalues, d.slots(), d.dim, slots, weights, nullptr, d.k, dout, d.dim,
                          N);
}

void product_key_backward(float* dq, float* dkeys1, float* dkeys2, float* dvalues,
                          const float* dout, const float* q, const float* keys1,
                          const float* keys2, const float* values, const int32_t* slots,
                          const float* weights, int64_t N, const ProductKeyDims& d) {
  check_product_key_dims(d);
  if (dq || dkeys1 || dkeys2) {
    std::vector<float> dsigma(static_cast<size_t>(N * d.k));
    product_key_backward_scores(dsigma.data(), dout, values, slots, weights, N, d);
    product_key_backward_keys(dq, dkeys1, dkeys2, dsigma.data(), q, keys1, keys2, slots, N, d);
  }
  if (dvalues) product_key_backward_values(dvalues, dout, slots, weights, N, d);
}

}  // namespace shamn
