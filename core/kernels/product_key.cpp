#include "core/kernels/product_key.h"

#include <cmath>

#include "core/buffer.h"
#include "core/check.h"
#include "core/gemm.h"
#include "core/kernel_level.h"
#include "core/kernels/key_groups.h"
#include "core/kernels/product_key_isa.h"
#include "core/parallel.h"
#include "core/prefetch.h"

namespace shamn {

void check_product_key_dims(const ProductKeyDims& d) {
  SHAMN_CHECK(d.n >= 1, "product-key memory: ", d.n, " keys per half; need at least 1");
  SHAMN_CHECK(d.k >= 1 && d.k <= d.n, "product-key memory: topk = ", d.k, " must be in [1, n] with n = ", d.n,
              " keys per half (memory.size = n^2 = ", d.n * d.n, ")");
  SHAMN_CHECK(d.dh >= 1, "product-key memory: key_dim = 2*dh needs dh >= 1, got dh = ", d.dh);
  SHAMN_CHECK(d.dim >= 1, "product-key memory: value width ", d.dim, " must be positive");
  SHAMN_CHECK(d.n <= 46340, "product-key memory: ", d.n, "^2 slots do not fit int32 slot ids");
}

namespace {

// Score tiles: about 1 MiB of s1 + s2 per tile, so they are still in cache when the
// selection reads them back, and memory stays bounded for any N.
constexpr int64_t kScoreTileFloats = 1 << 17;
// Tokens per task in the per-token loops: roughly 16K multiply-adds each.
int64_t token_grain(const ProductKeyDims& d) { return std::max<int64_t>(1, 16384 / (2 * d.n + d.k * d.dim)); }

using product_key_isa::kRankLanes;
using product_key_isa::Scored;

// Above this many entries a final cut (nth_element) precedes the counting selection.
constexpr int64_t kRankSelectMax = 128;

// A lambda rather than a function, so that nth_element and sort inline it.
constexpr auto ranks_above = [](const Scored& x, const Scored& y) {
  return x.s > y.s || (x.s == y.s && x.id < y.id);
};

const product_key_isa::Kernels* const kLevels[] = {
    &product_key_isa::kernels_scalar, &product_key_isa::kernels_avx2, &product_key_isa::kernels_avx512};
const product_key_isa::Kernels& isa() { return for_kernel_level(kLevels); }

// The k best of buf[0..m), best first (product_key_isa.h), on the selected SIMD level.
void rank_select(const Scored* buf, int64_t m, int64_t k, Scored* out, int64_t* keys) {
  isa().rank_select(buf, m, k, out, keys);
}

// Candidates are appended to a buffer and, when it fills, cut back to the k best
// with nth_element; buf[k-1] (the k-th best so far) is then the bar a newcomer must
// clear. Scanning with a bar that only rises costs a compare per element, and the
// cuts avoid the mispredicted sifts of a per-element heap. Ranked scores are never
// NaN, so ranks_above is a strict weak order and the standard algorithms apply.
struct BestK {
  Scored* buf;
  int64_t k, cap, size = 0;

  void cut() {
    std::nth_element(buf, buf + k - 1, buf + size, ranks_above);
    size = k;
  }
  const Scored& bar() const { return buf[k - 1]; }
  // Writes the k best to out[0..k), best first; out[k] is scratch (out must not overlap buf).
  void finish(Scored* out, int64_t* keys) {
    if (size > kRankSelectMax) cut();
    if (size <= kRankSelectMax) {
      rank_select(buf, size, k, out, keys);
    } else {  // a large k: counting would cost k*k
      std::sort(buf, buf + k, ranks_above);
      std::copy(buf, buf + k, out);
    }
  }
};

constexpr int64_t kScanBlock = 16;

// Mean and standard deviation of a score row, in 16 fixed lanes (vectorized, and
// the same result on every run).
void row_moments(const float* x, int64_t n, float& mean, float& stddev) {
  constexpr int64_t kLanes = 16;
  float sum[kLanes] = {}, sq[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      sum[j] += x[i + j];
      sq[j] += x[i + j] * x[i + j];
    }
  for (int64_t j = 1; j < kLanes; ++j) {
    sum[0] += sum[j];
    sq[0] += sq[j];
  }
  for (; i < n; ++i) {
    sum[0] += x[i];
    sq[0] += x[i] * x[i];
  }
  mean = sum[0] / static_cast<float>(n);
  stddev = std::sqrt(std::max(0.0f, sq[0] / static_cast<float>(n) - mean * mean));
}

// z with P(X > z) = 1.5 k / n for a standard normal X (bisection on erfc; once per
// kernel call), or +inf when that lets most scores through anyway.
float guess_z(const ProductKeyDims& d) {
  const double fraction = 1.5 * static_cast<double>(d.k) / static_cast<double>(d.n);
  if (fraction > 0.5) return std::numeric_limits<float>::infinity();
  double lo = 0, hi = 40;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(mid / std::sqrt(2.0)) > fraction ? lo : hi) = mid;
  }
  return static_cast<float>(lo);
}

// Per-task buffers of the selection.
struct SelectScratch {
  float z;      // from guess_z
  int64_t cap;  // candidate buffer entries: a whole score row, or 3k + a scan block
  std::vector<Scored> buf, best;
  std::vector<int64_t> keys;
  std::vector<float> a, c;
  std::vector<int32_t> I, J;
  SelectScratch(const ProductKeyDims& d, float z_guess)
      : z(z_guess), cap(std::max(3 * d.k + kScanBlock, d.n + 1)) {
    const auto k = static_cast<size_t>(d.k), padded = static_cast<size_t>(cap + kRankLanes);
    buf.resize(static_cast<size_t>(cap));
    best.resize(k + 1);  // best[k]: rank_select's scratch entry
    keys.resize(padded);
    a.resize(k);
    c.resize(k);
    I.resize(k);
    J.resize(k);
  }
  void finish(BestK& top) { top.finish(best.data(), keys.data()); }
};

// The k best of one score row, best first: ranked scores and key indices.
//
// Fast path: scores of a token against many keys are close to normal, so the bar
// mean + z * stddev (z from the SelectScratch, chosen to let about 1.5 k scores
// through) usually has between k and 2k scores above it. Those are compacted without
// branches and cut to the k best. If fewer than k clear the guessed bar it was too
// high (skewed or tied scores, NaN) and the general scan below runs instead. Either
// way the result is the exact top k: any bar with at least k scores above it lies
// below the k-th best.
void top_k_row(const float* score, int64_t n, int64_t k, SelectScratch& sc, float* best, int32_t* index) {
  Scored* buf = sc.buf.data();
  BestK top{buf, k, sc.cap};
  bool done = false;
  if (std::isfinite(sc.z)) {
    float mean, stddev;
    row_moments(score, n, mean, stddev);
    const float guess = mean + sc.z * stddev;
    const int64_t m = isa().compact_above(score, n, guess, buf);
    if (m >= k) {
      top.size = m;
      done = true;
    }
  }
  if (!done) {
    // The first k are the k best so far: the bar is the lowest of them.
    float bar = std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < k; ++i) {
      buf[i] = {product_key_rank_score(score[i]), static_cast<int32_t>(i)};
      bar = std::min(bar, buf[i].s);
    }
    top.size = k;
    // Indices arrive ascending, so a score equal to the bar loses the tie: only a
    // strictly higher one gets in (NaN, ranked -inf, never does).
    int64_t i = k;
    for (; i + kScanBlock <= n; i += kScanBlock) {
      bool any = false;
      for (int64_t j = 0; j < kScanBlock; ++j) any |= score[i + j] > bar;
      if (!any) continue;
      for (int64_t j = i; j < i + kScanBlock; ++j)
        if (score[j] > bar) buf[top.size++] = {score[j], static_cast<int32_t>(j)};
      if (top.size + kScanBlock > sc.cap) {
        top.cut();
        bar = top.bar().s;
      }
    }
    for (; i < n; ++i)
      if (score[i] > bar) buf[top.size++] = {score[i], static_cast<int32_t>(i)};
  }
  sc.finish(top);
  for (int64_t m = 0; m < k; ++m) {
    best[m] = sc.best[m].s;
    index[m] = sc.best[m].id;
  }
}

// One token: top-k of s1 and s2, the top k of the k*k candidate sums, the softmax.
// Both lists are sorted, so a_p + c_r does not increase along r, nor a_p + c_0 along
// p (float addition is monotonic): a row stops at the first sum strictly below the
// bar, and the whole scan stops when that happens at r = 0. The bar never ranks above
// the true k-th best, so nothing that belongs is skipped; equal sums are compared by
// slot id, so the result is exactly the full sort's. (The textbook frontier heap over
// (p, r) would not be: rounding can make a_p + c_r equal a_p + c_{r+1} while
// J_{r+1} < J_r.)
void select_token(int32_t* slots, float* weights, const float* s1, const float* s2, const ProductKeyDims& d,
                  SelectScratch& sc) {
  const int64_t n = d.n, k = d.k;
  top_k_row(s1, n, k, sc, sc.a.data(), sc.I.data());
  top_k_row(s2, n, k, sc, sc.c.data(), sc.J.data());
  // Any P x R corner of the candidate grid with P * R >= k holds at least k sums, all
  // at least a_{P-1} + c_{R-1}: the best such corner gives a bar at or below the k-th
  // best sum, and every sum at or above the bar is kept. When the buffer fills, the
  // k-th best of its entries raises the bar.
  float bar = -std::numeric_limits<float>::infinity();
  for (int64_t p = 0; p < k; ++p)
    bar = std::max(bar, product_key_rank_score(sc.a[p] + sc.c[(k + p) / (p + 1) - 1]));
  BestK top{sc.buf.data(), k, sc.cap};
  for (int64_t p = 0; p < k; ++p) {
    int64_t r = 0;
    for (; r < k; ++r) {
      const float v = product_key_rank_score(sc.a[p] + sc.c[r]);
      if (v < bar) break;
      sc.buf[top.size++] = {v, static_cast<int32_t>(sc.I[p] * n + sc.J[r])};
      if (top.size == sc.cap) {
        top.cut();
        bar = top.bar().s;
      }
    }
    if (r == 0) break;
  }
  sc.finish(top);
  const float max = sc.best[0].s;
  float total = 0;
  for (int64_t m = 0; m < k; ++m) {
    slots[m] = sc.best[m].id;
    total += (weights[m] = std::exp(sc.best[m].s - max));
  }
  const float inv = 1.0f / total;
  for (int64_t m = 0; m < k; ++m) weights[m] *= inv;
}

// Dot product with kLanes independent partial sums added pairwise at the end: the
// compiler vectorizes it, and the summation order is fixed.
float dot(const float* x, const float* y, int64_t len) {
  constexpr int64_t kLanes = 32;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * y[i + j];
  float tail = 0;
  for (; i < len; ++i) tail += x[i] * y[i];
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0] + tail;
}

// Value rows are scattered over a table far larger than the caches: without a hint
// each row is a string of cache misses. Rows are requested kPrefetchRows ahead of use.
constexpr int64_t kPrefetchRows = 2;

// out[t] = sum_m weights[t, m] * values[slots[t, m]] (+ residual[t] when given) for the tokens [lo, hi).
void gather_tokens(float* out, const float* values, const int32_t* slots, const float* weights, int64_t lo,
                   int64_t hi, const ProductKeyDims& d, const float* residual) {
  const int64_t D = d.dim, k = d.k, end = hi * k;
  for (int64_t e = lo * k; e < std::min(end, lo * k + kPrefetchRows); ++e)
    prefetch_span(values + static_cast<int64_t>(slots[e]) * D, D);
  for (int64_t t = lo; t < hi; ++t) {
    float* o = out + t * D;
    for (int64_t m = 0; m < k; ++m) {
      const int64_t e = t * k + m;
      if (e + kPrefetchRows < end)
        prefetch_span(values + static_cast<int64_t>(slots[e + kPrefetchRows]) * D, D);
      const float* v = values + static_cast<int64_t>(slots[e]) * D;
      const float w = weights[e];
      if (m == 0)
        for (int64_t c = 0; c < D; ++c) o[c] = w * v[c];
      else
        for (int64_t c = 0; c < D; ++c) o[c] += w * v[c];
    }
    if (residual) {
      const float* r = residual + t * D;
      for (int64_t c = 0; c < D; ++c) o[c] = r[c] + o[c];
    }
  }
}

// dst[rows[e]] += coef[e] * src[t * src_stride : + dim] over the entries e = t*per_token + j
// whose row is not negative. Entries are grouped by destination row (key_groups.h)
// and each row adds them in entry order, in parallel over rows: the same sums for
// any thread count (the pattern of rows.h scatter_add_rows). With row_values,
// the same pass also stores entry_dots[e] = dot(src row, row_values[rows[e]]):
// the value gradient's pass reads each value row once, in row order, where the
// scores' gradient token by token would read it again for every token naming it.
void scatter_add_scaled_rows(float* dst, int64_t num_rows, int64_t dim, const int32_t* rows,
                             const float* coef, int64_t per_token, const float* src, int64_t src_stride,
                             int64_t N, bool overwrite = false, const float* row_values = nullptr,
                             float* entry_dots = nullptr) {
  const KeyGroups by_row =
      group_by_key(N * per_token, num_rows, [rows](int64_t e) { return int64_t{rows[e]}; });
  const std::vector<int64_t>& start = by_row.start;
  const Buffer<int64_t>& order = by_row.order;
  if (overwrite)  // rows no entry reaches are zero; the others are stored below
    parallel_for(0, num_rows, std::max<int64_t>(1, 16384 / dim), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        if (start[r + 1] == start[r]) std::fill_n(dst + r * dim, dim, 0.0f);
    });
  std::vector<int32_t> used;
  for (int64_t r = 0; r < num_rows; ++r)
    if (start[r + 1] > start[r]) used.push_back(static_cast<int32_t>(r));
  if (used.empty()) return;
  const int64_t per_row = std::max<int64_t>(1, start[num_rows] / static_cast<int64_t>(used.size()));
  const int64_t grain = std::max<int64_t>(1, 16384 / (dim * per_row));
  parallel_for(0, static_cast<int64_t>(used.size()), grain, [&](int64_t lo, int64_t hi) {
    // The source rows come in row order, not in their own: each is requested
    // kPrefetchRows entries ahead (the task's entries are contiguous in order).
    const int64_t first = start[used[static_cast<size_t>(lo)]],
                  last = start[used[static_cast<size_t>(hi - 1)] + 1];
    for (int64_t i = first; i < std::min(last, first + kPrefetchRows); ++i)
      prefetch_span(src + (order[i] / per_token) * src_stride, dim);
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t r = used[static_cast<size_t>(u)];
      float* out = dst + r * dim;
      for (int64_t i = start[r]; i < start[r + 1]; ++i) {
        if (i + kPrefetchRows < last)
          prefetch_span(src + (order[i + kPrefetchRows] / per_token) * src_stride, dim);
        const int64_t e = order[i];
        const float* s = src + (e / per_token) * src_stride;
        const float w = coef[e];
        if (row_values) entry_dots[e] = dot(s, row_values + r * dim, dim);
        if (overwrite && i == start[r])  // the value 0 + w s would have (up to the sign of a zero)
          for (int64_t c = 0; c < dim; ++c) out[c] = w * s[c];
        else
          for (int64_t c = 0; c < dim; ++c) out[c] += w * s[c];
      }
    }
  });
}

// One token's distinct key rows (slot / n, or slot % n) with their summed dsigma, in
// first-appearance order: d a_p = sum of dsigma over the selected pairs using I_p.
int32_t collect_key_rows(int32_t* rows, float* coef, const int32_t* slots, const float* dsigma, int64_t n,
                         int64_t k, bool first_half) {
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

void product_key_scores(float* s1, float* s2, const float* q, const float* keys1, const float* keys2,
                        int64_t N, const ProductKeyDims& d) {
  if (N == 0) return;
  gemm(Trans::no, Trans::yes, N, d.n, d.dh, 1.0f, q, 2 * d.dh, keys1, d.dh, 0.0f, s1, d.n);
  gemm(Trans::no, Trans::yes, N, d.n, d.dh, 1.0f, q + d.dh, 2 * d.dh, keys2, d.dh, 0.0f, s2, d.n);
}

void product_key_select(int32_t* slots, float* weights, const float* s1, const float* s2, int64_t N,
                        const ProductKeyDims& d) {
  const float z = guess_z(d);
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    SelectScratch sc(d, z);
    for (int64_t t = lo; t < hi; ++t)
      select_token(slots + t * d.k, weights + t * d.k, s1 + t * d.n, s2 + t * d.n, d, sc);
  });
}

void product_key_gather(float* out, const float* values, const int32_t* slots, const float* weights,
                        int64_t N, const ProductKeyDims& d, const float* residual) {
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    gather_tokens(out, values, slots, weights, lo, hi, d, residual);
  });
}

void product_key_forward(float* out, int32_t* slots, float* weights, const float* q, const float* keys1,
                         const float* keys2, const float* values, int64_t N, const ProductKeyDims& d,
                         const float* residual) {
  check_product_key_dims(d);
  const int64_t tile = std::min(N, std::max<int64_t>(64, kScoreTileFloats / (2 * d.n)));
  // Uninitialised and 64-byte aligned (a std::vector zero-filled its 512 KiB each
  // call, 16-byte aligned: bench_memory fwd/total about 4% slower).
  Buffer<float> s(2 * tile * d.n);
  const float z = guess_z(d);
  float* s1 = s.data();
  float* s2 = s1 + tile * d.n;
  for (int64_t t0 = 0; t0 < N; t0 += tile) {
    const int64_t tn = std::min(tile, N - t0);
    product_key_scores(s1, s2, q + t0 * 2 * d.dh, keys1, keys2, tn, d);
    parallel_for(0, tn, token_grain(d), [&](int64_t lo, int64_t hi) {
      SelectScratch sc(d, z);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t t = t0 + i;
        select_token(slots + t * d.k, weights + t * d.k, s1 + i * d.n, s2 + i * d.n, d, sc);
      }
      gather_tokens(out, values, slots, weights, t0 + lo, t0 + hi, d, residual);
    });
  }
}

namespace {

// ds[m] = w[m] * (g[m] - sum_j w[j] g[j]) over one token's k entries, g in ds.
// The sum is written as FMAs: GCC vectorises this loop as an in-order sum of
// separately rounded products (not contracted), which changed the bits of the
// scalar FMA chain this sum was when it shared the loop of the dot products.
void center_scores(float* ds, const float* w, int64_t k) {
  float gbar = 0;
  for (int64_t m = 0; m < k; ++m) gbar = std::fma(w[m], ds[m], gbar);
  for (int64_t m = 0; m < k; ++m) ds[m] = w[m] * (ds[m] - gbar);
}

// product_key_backward_scores and product_key_backward_values in one pass over
// the value rows (scatter_add_scaled_rows): the same dot products and sums.
void backward_scores_and_values(float* dsigma, float* dvalues, const float* dout, const float* values,
                                const int32_t* slots, const float* weights, int64_t N,
                                const ProductKeyDims& d, bool overwrite) {
  const int64_t k = d.k;
  scatter_add_scaled_rows(dvalues, d.slots(), d.dim, slots, weights, k, dout, d.dim, N, overwrite, values,
                          dsigma);
  parallel_for(0, N, std::max<int64_t>(1, 4096 / k), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) center_scores(dsigma + t * k, weights + t * k, k);
  });
}

}  // namespace

void product_key_backward_scores(float* dsigma, const float* dout, const float* values, const int32_t* slots,
                                 const float* weights, int64_t N, const ProductKeyDims& d) {
  const int64_t k = d.k, D = d.dim;
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* go = dout + t * D;
      float* ds = dsigma + t * k;
      for (int64_t m = 0; m < k; ++m) {
        const int64_t e = t * k + m;
        if (e + kPrefetchRows < hi * k)
          prefetch_span(values + static_cast<int64_t>(slots[e + kPrefetchRows]) * D, D);
        ds[m] = dot(go, values + static_cast<int64_t>(slots[e]) * D, D);
      }
      center_scores(ds, weights + t * k, k);
    }
  });
}

void product_key_backward_keys(float* dq, float* dkeys1, float* dkeys2, const float* dsigma, const float* q,
                               const float* keys1, const float* keys2, const int32_t* slots, int64_t N,
                               const ProductKeyDims& d) {
  if (!dq && !dkeys1 && !dkeys2) return;
  const int64_t n = d.n, k = d.k, dh = d.dh;
  const int64_t nk = N * k;
  // Uninitialised (a serial zero fill of 1.6M entries each held back 16 threads):
  // a token writes its k rows (-1 past its count, left out of the scatter) and
  // the coefficients below its count.
  Buffer<int32_t> rows1(nk), rows2(nk);
  Buffer<float> coef1(nk), coef2(nk);
  parallel_for(0, N, token_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t e = t * k;
      const int32_t count1 = collect_key_rows(&rows1[e], &coef1[e], slots + e, dsigma + e, n, k, true);
      const int32_t count2 = collect_key_rows(&rows2[e], &coef2[e], slots + e, dsigma + e, n, k, false);
      std::fill(&rows1[e] + count1, &rows1[e] + k, -1);
      std::fill(&rows2[e] + count2, &rows2[e] + k, -1);
      if (!dq) continue;
      float* dq1 = dq + t * 2 * dh;
      float* dq2 = dq1 + dh;
      for (int32_t j = 0; j < count1; ++j) {
        const float* key = keys1 + static_cast<int64_t>(rows1[e + j]) * dh;
        const float w = coef1[e + j];
        for (int64_t c = 0; c < dh; ++c) dq1[c] += w * key[c];
      }
      for (int32_t j = 0; j < count2; ++j) {
        const float* key = keys2 + static_cast<int64_t>(rows2[e + j]) * dh;
        const float w = coef2[e + j];
        for (int64_t c = 0; c < dh; ++c) dq2[c] += w * key[c];
      }
    }
  });
  if (dkeys1) scatter_add_scaled_rows(dkeys1, n, dh, rows1.data(), coef1.data(), k, q, 2 * dh, N);
  if (dkeys2) scatter_add_scaled_rows(dkeys2, n, dh, rows2.data(), coef2.data(), k, q + dh, 2 * dh, N);
}

void product_key_backward_values(float* dvalues, const float* dout, const int32_t* slots,
                                 const float* weights, int64_t N, const ProductKeyDims& d, bool overwrite) {
  scatter_add_scaled_rows(dvalues, d.slots(), d.dim, slots, weights, d.k, dout, d.dim, N, overwrite);
}

void product_key_backward(float* dq, float* dkeys1, float* dkeys2, float* dvalues, const float* dout,
                          const float* q, const float* keys1, const float* keys2, const float* values,
                          const int32_t* slots, const float* weights, int64_t N, const ProductKeyDims& d,
                          bool overwrite_values) {
  check_product_key_dims(d);
  if (dq || dkeys1 || dkeys2) {
    Buffer<float> dsigma(N * d.k);  // every entry written
    if (dvalues) {
      backward_scores_and_values(dsigma.data(), dvalues, dout, values, slots, weights, N, d,
                                 overwrite_values);
    } else {
      product_key_backward_scores(dsigma.data(), dout, values, slots, weights, N, d);
    }
    product_key_backward_keys(dq, dkeys1, dkeys2, dsigma.data(), q, keys1, keys2, slots, N, d);
  } else if (dvalues) {
    product_key_backward_values(dvalues, dout, slots, weights, N, d, overwrite_values);
  }
}

}  // namespace shamn
