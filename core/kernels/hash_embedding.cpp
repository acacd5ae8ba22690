#include "core/kernels/hash_embedding.h"

#include <limits>

#include "core/check.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/key_groups.h"
#include "core/parallel.h"
#include "core/simd.h"

namespace shamn {

void hash_bucket_index_fill(int32_t* bucket_index, int64_t vocab, int64_t hashes, int64_t buckets) {
  SHAMN_CHECK(vocab >= 0, "hash_bucket_index: negative vocabulary size ", vocab);
  SHAMN_CHECK(hashes >= 1, "hash_bucket_index: needs at least one hash function, got ", hashes,
              " (model.embed.hashes)");
  SHAMN_CHECK(buckets >= 1 && buckets <= std::numeric_limits<int32_t>::max(),
              "hash_bucket_index: the bucket count must be in [1, 2^31), got ", buckets,
              " (model.embed.buckets, or a model.embed.sparsity too close to 1)");
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  for (int64_t t = 0; t < vocab; ++t)
    for (int64_t j = 0; j < hashes; ++j) {
      const uint64_t key = static_cast<uint64_t>(t) + static_cast<uint64_t>(j + 1) * kGolden;
      bucket_index[t * hashes + j] = static_cast<int32_t>(hash_mix64(key) % static_cast<uint64_t>(buckets));
    }
}

void check_hash_buckets(const int32_t* bucket_index, const HashDims& d, const char* op) {
  for (int64_t t = 0; t < d.vocab; ++t)
    for (int64_t j = 0; j < d.hashes; ++j) {
      const int32_t b = bucket_index[t * d.hashes + j];
      SHAMN_CHECK(b >= 0 && b < d.buckets, op, ": bucket_index[", t, ", ", j, "] = ", b,
                  " is outside the table's rows [0, ", d.buckets, ")");
    }
}

void check_hash_tokens(const int32_t* tokens, int64_t n, int64_t vocab, const char* op, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    SHAMN_CHECK(tokens[i] >= 0 && tokens[i] < vocab, op, ": ", what, " ", tokens[i], " at position ", i,
                " is outside the vocabulary [0, ", vocab, ")");
}

void hash_embedding_forward(float* out, const float* table, const float* importance,
                            const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                            const HashDims& d) {
  const int64_t h = d.hashes, dim = d.dim;
  parallel_for(0, n, row_grain(dim * h), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t t = tokens[p];
      float* o = out + p * dim;
      for (int64_t j = 0; j < h; ++j) {
        const float w = importance[t * h + j];
        const float* row = table + static_cast<int64_t>(bucket_index[t * h + j]) * dim;
        if (j == 0)
          for (int64_t c = 0; c < dim; ++c) o[c] = w * row[c];
        else
          for (int64_t c = 0; c < dim; ++c) o[c] += w * row[c];
      }
    }
  });
}

// Entries (position p, hash j) are grouped by their bucket (key_groups.h), kept
// in (p, j) order inside each bucket; each bucket row then adds its entries in that
// order, in parallel over buckets: no atomics, the same sums for any thread count.
void hash_embedding_backward_table(float* dtable, const float* dout, const float* importance,
                                   const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                   const HashDims& d) {
  const int64_t h = d.hashes, dim = d.dim;
  const KeyGroups by_bucket = group_by_key(n * h, d.buckets, [&](int64_t e) {
    return int64_t{bucket_index[static_cast<int64_t>(tokens[e / h]) * h + e % h]};
  });
  const std::vector<int64_t>& start = by_bucket.start;

  parallel_for(0, d.buckets, row_grain(dim), [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      float* row = dtable + b * dim;
      for (int64_t k = start[b]; k < start[b + 1]; ++k) {
        const int64_t e = by_bucket.order[k];
        const int64_t p = e / h;
        const float w = importance[static_cast<int64_t>(tokens[p]) * h + e % h];
        const float* g = dout + p * dim;
        for (int64_t c = 0; c < dim; ++c) row[c] += w * g[c];
      }
    }
  });
}

// The dot products are independent per (position, hash) and run in parallel; the
// sums into a repeated token's weights then run in position order.
void hash_embedding_backward_importance(float* dimportance, const float* dout, const float* table,
                                        const int32_t* bucket_index, const int32_t* tokens, int64_t n,
                                        const HashDims& d) {
  const int64_t h = d.hashes, dim = d.dim;
  std::vector<float> dots(static_cast<size_t>(n * h));
  parallel_for(0, n, row_grain(dim * h), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t t = tokens[p];
      const float* g = dout + p * dim;
      for (int64_t j = 0; j < h; ++j) {
        const float* row = table + static_cast<int64_t>(bucket_index[t * h + j]) * dim;
        dots[static_cast<size_t>(p * h + j)] = simd::dot(g, row, dim);
      }
    }
  });
  for (int64_t p = 0; p < n; ++p)
    for (int64_t j = 0; j < h; ++j)
      dimportance[static_cast<int64_t>(tokens[p]) * h + j] += dots[static_cast<size_t>(p * h + j)];
}

}  // namespace shamn
