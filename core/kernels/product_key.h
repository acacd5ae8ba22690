#pragma once
// Product-key memory lookup (SPEC 1.5, Lample et al. 2019).
//   q: [N, 2*dh] (q1 = q[:, :dh], q2 = q[:, dh:])   keys1, keys2: [n, dh]
//   values: [n*n, D]   out, dout: [N, D]
//   slots: [N, k] int32 (I_p * n + J_q)   weights: [N, k] (softmax of the scores)
//   s1, s2: [N, n] scores   dsigma: [N, k]
//   dq: [N, 2*dh]  dkeys1, dkeys2: [n, dh]  dvalues: [n*n, D]
// Per token: s1 = keys1 q1, s2 = keys2 q2; I, a = topk(s1, k); J, c = topk(s2, k);
// the top k of the k*k sums a_p + c_q give the scores sigma and the slots;
// out = sum_m softmax(sigma)[m] * values[slots[m]].
//
// Every top-k ranks by (score descending, index ascending): ties go to the lower key
// index, and among the candidates to the lower slot id. A NaN score ranks as -inf, so
// the order stays total and both implementations agree even on broken inputs.
// slots and weights come out in that rank order; they are all backward needs
// (I_p = slot / n and J_q = slot % n).
//
// The selection is piecewise constant: gradients reach q and the keys only through
// the scores of the selected pairs, values only through the selected rows.
// Backward kernels accumulate (+=) into dq, dkeys1, dkeys2 and dvalues; a null
// gradient pointer skips that gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace shamn {

struct ProductKeyDims {
  int64_t n = 0;    // keys per half: the memory has n*n slots
  int64_t dh = 0;   // half of memory.key_dim
  int64_t k = 0;    // memory.topk, in [1, n]
  int64_t dim = 0;  // D: width of a value row

  int64_t slots() const { return n * n; }
};

// Throws naming the offending size unless 1 <= k <= n, dh >= 1, D >= 1 and the slot
// ids fit int32.
void check_product_key_dims(const ProductKeyDims& d);

template <class T>
inline T product_key_rank_score(T s) {
  return std::isnan(s) ? -std::numeric_limits<T>::infinity() : s;
}

// ---------------------------------------------------------------------------------
// Fast float kernels. The forward computes the scores with shamn::gemm in token
// tiles and selects in parallel over tokens; each kernel writes every output
// element from one task and reduces in a fixed order (thread-count independent).

// With a residual [N, D] (not out's memory), out = residual + the lookup: bitwise
// the lookup followed by adding it, added to each token's row as it is finished.
void product_key_forward(float* out, int32_t* slots, float* weights, const float* q, const float* keys1,
                         const float* keys2, const float* values, int64_t N, const ProductKeyDims& d,
                         const float* residual = nullptr);

// The forward's three stages, exposed for the benchmark (and tests).
// s1 = Q1 keys1^T, s2 = Q2 keys2^T (overwritten).
void product_key_scores(float* s1, float* s2, const float* q, const float* keys1, const float* keys2,
                        int64_t N, const ProductKeyDims& d);
// Top-k of each score row, the merge of the k*k candidates and the softmax.
void product_key_select(int32_t* slots, float* weights, const float* s1, const float* s2, int64_t N,
                        const ProductKeyDims& d);
// out = sum_m weights[m] * values[slots[m]] (overwritten), plus residual when given.
void product_key_gather(float* out, const float* values, const int32_t* slots, const float* weights,
                        int64_t N, const ProductKeyDims& d, const float* residual = nullptr);

// Accumulates into dq, dkeys1, dkeys2 and dvalues (those not null); with
// overwrite_values, dvalues is written instead (every element: the rows no token
// read are zeroed), so it needs no zero fill first.
void product_key_backward(float* dq, float* dkeys1, float* dkeys2, float* dvalues, const float* dout,
                          const float* q, const float* keys1, const float* keys2, const float* values,
                          const int32_t* slots, const float* weights, int64_t N, const ProductKeyDims& d,
                          bool overwrite_values = false);

// The backward's stages, exposed for the benchmark.
// dsigma[m] = w[m] * (g[m] - sum_j w[j] g[j]) with g[m] = dout . values[slots[m]]
// (overwritten: it is scratch, not a gradient of an input).
void product_key_backward_scores(float* dsigma, const float* dout, const float* values, const int32_t* slots,
                                 const float* weights, int64_t N, const ProductKeyDims& d);
// dq, dkeys1, dkeys2 from dsigma (each may be null).
void product_key_backward_keys(float* dq, float* dkeys1, float* dkeys2, const float* dsigma, const float* q,
                               const float* keys1, const float* keys2, const int32_t* slots, int64_t N,
                               const ProductKeyDims& d);
// dvalues[slots[m]] += weights[m] * dout (with overwrite: written, rows no slot
// names zeroed).
void product_key_backward_values(float* dvalues, const float* dout, const int32_t* slots,
                                 const float* weights, int64_t N, const ProductKeyDims& d,
                                 bool overwrite = false);

// ---------------------------------------------------------------------------------
// The slow, obvious twins: full sorts, every candidate pair, sums in double. The test
// oracle and the f64 path for gradient checks.

namespace detail {
// Indices of the k best of `score` by (score desc, index asc), best first.
template <class T>
std::vector<int64_t> top_k_naive(const std::vector<T>& score, int64_t k) {
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    const T sx = product_key_rank_score(score[x]), sy = product_key_rank_score(score[y]);
    return sx > sy || (sx == sy && x < y);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}
}  // namespace detail

template <class T>
void product_key_forward_naive(T* out, int32_t* slots, T* weights, const T* q, const T* keys1, const T* keys2,
                               const T* values, int64_t N, const ProductKeyDims& d,
                               const T* residual = nullptr) {
  const int64_t n = d.n, dh = d.dh, k = d.k, D = d.dim;
  std::vector<T> s1(static_cast<size_t>(n)), s2(static_cast<size_t>(n));
  std::vector<T> cand_score(static_cast<size_t>(k * k));
  std::vector<int64_t> cand_slot(static_cast<size_t>(k * k));
  for (int64_t t = 0; t < N; ++t) {
    const T* q1 = q + t * 2 * dh;
    const T* q2 = q1 + dh;
    for (int64_t i = 0; i < n; ++i) {
      double acc1 = 0, acc2 = 0;
      for (int64_t j = 0; j < dh; ++j) {
        acc1 += static_cast<double>(keys1[i * dh + j]) * q1[j];
        acc2 += static_cast<double>(keys2[i * dh + j]) * q2[j];
      }
      s1[i] = static_cast<T>(acc1);
      s2[i] = static_cast<T>(acc2);
    }
    const std::vector<int64_t> I = detail::top_k_naive(s1, k);
    const std::vector<int64_t> J = detail::top_k_naive(s2, k);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t r = 0; r < k; ++r) {
        cand_score[p * k + r] = s1[I[p]] + s2[J[r]];  // in T, as the fast kernel adds
        cand_slot[p * k + r] = I[p] * n + J[r];
      }
    std::vector<int64_t> order(static_cast<size_t>(k * k));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      const T sx = product_key_rank_score(cand_score[x]);
      const T sy = product_key_rank_score(cand_score[y]);
      return sx > sy || (sx == sy && cand_slot[x] < cand_slot[y]);
    });
    const T top = product_key_rank_score(cand_score[order[0]]);
    double total = 0;
    for (int64_t m = 0; m < k; ++m)
      total += std::exp(static_cast<double>(product_key_rank_score(cand_score[order[m]])) - top);
    for (int64_t m = 0; m < k; ++m) {
      const double sigma = product_key_rank_score(cand_score[order[m]]);
      slots[t * k + m] = static_cast<int32_t>(cand_slot[order[m]]);
      weights[t * k + m] = static_cast<T>(std::exp(sigma - top) / total);
    }
    for (int64_t c = 0; c < D; ++c) {
      double acc = 0;
      for (int64_t m = 0; m < k; ++m)
        acc += static_cast<double>(weights[t * k + m]) * values[slots[t * k + m] * D + c];
      out[t * D + c] = static_cast<T>(acc);
      if (residual) out[t * D + c] = residual[t * D + c] + out[t * D + c];
    }
  }
}

template <class T>
void product_key_backward_naive(T* dq, T* dkeys1, T* dkeys2, T* dvalues, const T* dout, const T* q,
                                const T* keys1, const T* keys2, const T* values, const int32_t* slots,
                                const T* weights, int64_t N, const ProductKeyDims& d) {
  const int64_t n = d.n, dh = d.dh, k = d.k, D = d.dim;
  std::vector<double> g(static_cast<size_t>(k));
  for (int64_t t = 0; t < N; ++t) {
    const T* go = dout + t * D;
    const T* w = weights + t * k;
    const int32_t* sl = slots + t * k;
    double gbar = 0;
    for (int64_t m = 0; m < k; ++m) {
      double acc = 0;
      for (int64_t c = 0; c < D; ++c) acc += static_cast<double>(go[c]) * values[sl[m] * D + c];
      g[m] = acc;
      gbar += w[m] * acc;
    }
    for (int64_t m = 0; m < k; ++m) {
      const double dsigma = w[m] * (g[m] - gbar);
      const int64_t i = sl[m] / n, j = sl[m] % n;
      for (int64_t c = 0; c < dh; ++c) {
        // sigma = keys1[i] . q1 + keys2[j] . q2
        if (dq) {
          dq[t * 2 * dh + c] += static_cast<T>(dsigma * keys1[i * dh + c]);
          dq[t * 2 * dh + dh + c] += static_cast<T>(dsigma * keys2[j * dh + c]);
        }
        if (dkeys1) dkeys1[i * dh + c] += static_cast<T>(dsigma * q[t * 2 * dh + c]);
        if (dkeys2) dkeys2[j * dh + c] += static_cast<T>(dsigma * q[t * 2 * dh + dh + c]);
      }
      if (dvalues)
        for (int64_t c = 0; c < D; ++c) dvalues[sl[m] * D + c] += w[m] * go[c];
    }
  }
}

// f64 (gradient checks) runs the naive twins under the fast kernels' names, so an
// op templated on the scalar calls one name for both dtypes.
inline void product_key_forward(double* out, int32_t* slots, double* weights, const double* q,
                                const double* keys1, const double* keys2, const double* values, int64_t N,
                                const ProductKeyDims& d, const double* residual = nullptr) {
  product_key_forward_naive(out, slots, weights, q, keys1, keys2, values, N, d, residual);
}
inline void product_key_backward(double* dq, double* dkeys1, double* dkeys2, double* dvalues,
                                 const double* dout, const double* q, const double* keys1,
                                 const double* keys2, const double* values, const int32_t* slots,
                                 const double* weights, int64_t N, const ProductKeyDims& d,
                                 bool overwrite_values = false) {
  if (dvalues && overwrite_values) std::fill_n(dvalues, d.slots() * d.dim, 0.0);
  product_key_backward_naive(dq, dkeys1, dkeys2, dvalues, dout, q, keys1, keys2, values, slots, weights, N,
                             d);
}

}  // namespace shamn
