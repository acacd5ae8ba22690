#pragma once
// SparseHashEmbedding (SPEC 1.2): every token owns `h` hashed rows of a shared table
// and mixes them with its own importance weights,
//   e(t) = sum_j importance[t, j] * table[bucket_index[t, j]].
//
// Operands (SPEC letters; N positions, `buckets` table rows):
//   table: [buckets, D]  importance: [V, h]  bucket_index: [V, h] int32
//   tokens: [N] int32    out, dout: [N, D]
//   dtable: [buckets, D] dimportance: [V, h]
// Backward kernels accumulate (+=). The float kernels are parallel and give the
// same bits for any thread count; the `_naive` twins are the test oracle and the
// f64 path of gradient checks.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shamn {

struct HashDims {
  int64_t vocab = 0;    // V
  int64_t hashes = 0;   // h
  int64_t buckets = 0;  // rows of the table
  int64_t dim = 0;      // D
};

// SPEC 1.2's mixer (SplitMix64's finaliser), on uint64 with wrap-around.
constexpr uint64_t hash_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// bucket_index[t, j] = mix64(t + (j + 1) * 0x9E3779B97F4A7C15) mod buckets.
// bucket_index: [V, h] int32
void hash_bucket_index_fill(int32_t* bucket_index, int64_t vocab, int64_t hashes, int64_t buckets);

// Throw naming the first entry outside [0, buckets) / the first token outside [0, V).
void check_hash_buckets(const int32_t* bucket_index, const HashDims& dims, const char* op);
void check_hash_tokens(const int32_t* tokens, int64_t n, int64_t vocab, const char* op, const char* what);

void hash_embedding_forward(float* out, const float* table, const float* importance,
                            const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                            const HashDims& dims);
void hash_embedding_backward_table(float* dtable, const float* dout, const float* importance,
                                   const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                   const HashDims& dims);
void hash_embedding_backward_importance(float* dimportance, const float* dout, const float* table,
                                        const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                        const HashDims& dims);

template <class T>
void hash_embedding_forward_naive(T* out, const T* table, const T* importance, const int32_t* bucket_index,
                                  const int32_t* tokens, int64_t n, const HashDims& d) {
  std::vector<double> acc(static_cast<size_t>(d.dim));
  for (int64_t p = 0; p < n; ++p) {
    const int64_t t = tokens[p];
    for (double& a : acc) a = 0.0;
    for (int64_t j = 0; j < d.hashes; ++j) {
      const double w = importance[t * d.hashes + j];
      const T* row = table + static_cast<int64_t>(bucket_index[t * d.hashes + j]) * d.dim;
      for (int64_t c = 0; c < d.dim; ++c) acc[c] += w * row[c];
    }
    for (int64_t c = 0; c < d.dim; ++c) out[p * d.dim + c] = static_cast<T>(acc[c]);
  }
}

template <class T>
void hash_embedding_backward_table_naive(T* dtable, const T* dout, const T* importance,
                                         const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                         const HashDims& d) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t t = tokens[p];
    for (int64_t j = 0; j < d.hashes; ++j) {
      const T w = importance[t * d.hashes + j];
      T* row = dtable + static_cast<int64_t>(bucket_index[t * d.hashes + j]) * d.dim;
      for (int64_t c = 0; c < d.dim; ++c) row[c] += w * dout[p * d.dim + c];
    }
  }
}

template <class T>
void hash_embedding_backward_importance_naive(T* dimportance, const T* dout, const T* table,
                                              const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                              const HashDims& d) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t t = tokens[p];
    for (int64_t j = 0; j < d.hashes; ++j) {
      const T* row = table + static_cast<int64_t>(bucket_index[t * d.hashes + j]) * d.dim;
      double acc = 0.0;
      for (int64_t c = 0; c < d.dim; ++c) acc += static_cast<double>(dout[p * d.dim + c]) * row[c];
      dimportance[t * d.hashes + j] += static_cast<T>(acc);
    }
  }
}

// f64 (gradient checks) runs the naive twins under the fast kernels' names, so an
// op templated on the scalar calls one name for both dtypes.
inline void hash_embedding_forward(double* out, const double* table, const double* importance,
                                   const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                   const HashDims& dims) {
  hash_embedding_forward_naive(out, table, importance, bucket_index, tokens, n, dims);
}
inline void hash_embedding_backward_table(double* dtable, const double* dout, const double* importance,
                                          const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                          const HashDims& dims) {
  hash_embedding_backward_table_naive(dtable, dout, importance, bucket_index, tokens, n, dims);
}
inline void hash_embedding_backward_importance(double* dimportance, const double* dout, const double* table,
                                               const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                               const HashDims& dims) {
  hash_embedding_backward_importance_naive(dimportance, dout, table, bucket_index, tokens, n, dims);
}

}  // namespace shamn
