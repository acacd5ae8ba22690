#pragma once
// Hierarchical MoE routing (SPEC 1.6).
//   rg: [N, G] group logits   re: [N, G*E] expert logits
//   pg = softmax(rg)   pe = softmax of re within each group   P[n, g*E+j] = pg[g] * pe[g*E+j]
//   experts, gates: [N, k] (selected expert ids, int32; normalised gates)
// The dispatch plan puts each expert's (token, slot) pairs side by side, so an
// expert runs once over a contiguous block of rows (training and the inference
// runtime both run experts this way):
//   order: [N*k] token ids, by expert, ascending within one
//   offsets: [X+1] expert e's rows are [offsets[e], offsets[e+1])
//   row: [N, k] the plan row of (token t, slot i)
//   ys: [N*k, D] the experts' outputs in plan order
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/activation.h"
#include "core/kernels/elementwise.h"
#include "core/parallel.h"
#include "core/prefetch.h"

namespace shamn {

struct MoeShape {
  int64_t groups = 4;             // G
  int64_t experts_per_group = 4;  // E
  int64_t group_k = 1;
  int64_t k = 2;
  int64_t experts() const { return groups * experts_per_group; }
};

// Softmax of each of `rows` rows of n values, max-shifted, x and y: [rows, n]
// (y may be x). The exponentials of all rows are one exp_forward call: float
// goes through the vectorised exp (the same bits at every kernel level; the
// routers' softmax went from 2.6% to 1.2% of a runtime prefill against a
// scalar std::exp per value), f64 through std::exp.
template <class T>
void softmax_rows(T* y, const T* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    T m = x[r * n];
    for (int64_t i = 1; i < n; ++i) m = std::max(m, x[r * n + i]);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] - m;
  }
  exp_forward(y, y, rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    T sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += y[r * n + i];
    for (int64_t i = 0; i < n; ++i) y[r * n + i] /= sum;
  }
}

// P, pg [N, G], pe [N, G*E] (pg and pe saved for backward). Tokens go in
// chunks of 16, so each softmax_rows call has a few hundred values.
template <class T>
void router_probs_forward(T* P, T* pg, T* pe, const T* rg, const T* re, int64_t n, const MoeShape& s) {
  const int64_t G = s.groups, E = s.experts_per_group, X = s.experts();
  constexpr int64_t kChunk = 16;
  parallel_for(0, n, std::max<int64_t>(kChunk, row_grain(X)), [&](int64_t lo, int64_t hi) {
    for (int64_t t0 = lo; t0 < hi; t0 += kChunk) {
      const int64_t c = std::min(kChunk, hi - t0);
      softmax_rows(pg + t0 * G, rg + t0 * G, c, G);
      softmax_rows(pe + t0 * X, re + t0 * X, c * G, E);  // pe's groups are rows of E
      for (int64_t t = t0; t < t0 + c; ++t)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t j = 0; j < E; ++j) P[t * X + g * E + j] = pg[t * G + g] * pe[t * X + g * E + j];
    }
  });
}

// drg += d/d rg, dre += d/d re of sum(dP * P). Either output may be null.
template <class T>
void router_probs_backward(T* drg, T* dre, const T* dP, const T* pg, const T* pe, int64_t n,
                           const MoeShape& s) {
  const int64_t G = s.groups, E = s.experts_per_group, X = s.experts();
  parallel_for(0, n, row_grain(X), [&](int64_t lo, int64_t hi) {
    std::vector<T> dpg(static_cast<size_t>(G));
    for (int64_t t = lo; t < hi; ++t) {
      const T* dp = dP + t * X;
      const T* g_ = pg + t * G;
      const T* e_ = pe + t * X;
      for (int64_t g = 0; g < G; ++g) {
        T acc = 0, dot = 0;
        for (int64_t j = 0; j < E; ++j) acc += dp[g * E + j] * e_[g * E + j];
        dpg[g] = acc;
        if (dre) {
          // dpe = dP * pg; softmax backward within the group.
          for (int64_t j = 0; j < E; ++j) dot += dp[g * E + j] * g_[g] * e_[g * E + j];
          for (int64_t j = 0; j < E; ++j)
            dre[t * X + g * E + j] += e_[g * E + j] * (dp[g * E + j] * g_[g] - dot);
        }
      }
      if (drg) {
        T dot = 0;
        for (int64_t g = 0; g < G; ++g) dot += dpg[g] * g_[g];
        for (int64_t g = 0; g < G; ++g) drg[t * G + g] += g_[g] * (dpg[g] - dot);
      }
    }
  });
}

// The position in [0, n) of the largest value(i) not taken (one is free).
// Only a strictly greater value takes the lead: a tie stays with the lower
// position, and positions ascend with the index they stand for.
template <class Value>
int64_t best_free(int64_t n, const char* taken, Value value) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!taken[i] && (best < 0 || value(i) > value(best))) best = i;
  return best;
}

// Tree routing: the top group_k groups by pg, then the top k experts by P among
// them; ties go to the lower index. experts[t, i] in selection order (P descending).
// Each pick is a scan for the best value not yet taken, over the groups and then
// over the chosen groups' experts only: k and group_k are a few (top-1 group of
// 4, top-2 of its 4 experts), where partial sorts of all 16 cost 1.45x more per
// token (43 against 30 ns).
template <class T>
void select_experts(int32_t* experts, const T* pg, const T* P, int64_t n, const MoeShape& s) {
  const int64_t G = s.groups, E = s.experts_per_group, X = s.experts();
  parallel_for(0, n, 64, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> cand(static_cast<size_t>(s.group_k * E));
    std::vector<char> taken(static_cast<size_t>(std::max(G, s.group_k * E)));
    for (int64_t t = lo; t < hi; ++t) {
      const T* pg_t = pg + t * G;
      const T* P_t = P + t * X;
      std::fill_n(taken.begin(), G, 0);
      for (int64_t i = 0; i < s.group_k; ++i)
        taken[best_free(G, taken.data(), [&](int64_t g) { return pg_t[g]; })] = 1;
      int64_t c = 0;  // the chosen groups' experts, in index order
      for (int64_t g = 0; g < G; ++g)
        if (taken[g])
          for (int64_t j = 0; j < E; ++j) cand[c++] = g * E + j;
      std::fill_n(taken.begin(), c, 0);
      for (int64_t i = 0; i < s.k; ++i) {
        const int64_t b = best_free(c, taken.data(), [&](int64_t j) { return P_t[cand[j]]; });
        taken[b] = 1;
        experts[t * s.k + i] = static_cast<int32_t>(cand[b]);
      }
    }
  });
}

// gates[t, i] = P[t, e_i] / sum_i P[t, e_i]
template <class T>
void moe_gates_forward(T* gates, const T* P, const int32_t* experts, int64_t n, int64_t X, int64_t k) {
  parallel_for(0, n, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      T sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += P[t * X + experts[t * k + i]];
      for (int64_t i = 0; i < k; ++i) gates[t * k + i] = P[t * X + experts[t * k + i]] / sum;
    }
  });
}

// dP[t, e_l] += (dg_l - sum_i dg_i g_i) / sum_i P[t, e_i]
template <class T>
void moe_gates_backward(T* dP, const T* dgates, const T* gates, const T* P, const int32_t* experts, int64_t n,
                        int64_t X, int64_t k) {
  parallel_for(0, n, 256, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      T sum = 0, dot = 0;
      for (int64_t i = 0; i < k; ++i) {
        sum += P[t * X + experts[t * k + i]];
        dot += dgates[t * k + i] * gates[t * k + i];
      }
      for (int64_t i = 0; i < k; ++i) dP[t * X + experts[t * k + i]] += (dgates[t * k + i] - dot) / sum;
    }
  });
}

// Fills order [N*k], row [N*k] and offsets [X+1]; checks every id is below X.
// row is a permutation of [0, N*k): each expert row belongs to one (token, slot).
void moe_dispatch_plan(int32_t* order, int32_t* row, int64_t* offsets, const int32_t* experts, int64_t n,
                       int64_t k, int64_t X);

// out[t] = sum_i gates[t, i] * ys[row[t, i]], slots in order; with accumulate the
// sum is added to out[t] term by term instead (a residual stream); with a
// residual [n, dim] (and no accumulate) out[t] = residual[t] + that sum, the bits
// of adding the two afterwards.
template <class T>
void moe_combine_forward(T* out, const T* gates, const T* ys, const int32_t* row, int64_t n, int64_t k,
                         int64_t dim, bool accumulate, const T* residual = nullptr) {
  parallel_for(0, n, row_grain(dim * k), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      // ys is in expert order: the next token's rows are requested ahead (1.4x).
      if (t + 1 < hi)
        for (int64_t i = 0; i < k; ++i)
          prefetch_span(ys + static_cast<int64_t>(row[(t + 1) * k + i]) * dim, dim);
      T* ot = out + t * dim;
      if (!accumulate)
        for (int64_t d = 0; d < dim; ++d) ot[d] = 0;
      for (int64_t i = 0; i < k; ++i) {
        const T* y = ys + static_cast<int64_t>(row[t * k + i]) * dim;
        const T gi = gates[t * k + i];
        for (int64_t d = 0; d < dim; ++d) ot[d] += gi * y[d];
      }
      if (residual && !accumulate) {
        const T* rt = residual + t * dim;
        for (int64_t d = 0; d < dim; ++d) ot[d] = rt[d] + ot[d];
      }
    }
  });
}

}  // namespace shamn
