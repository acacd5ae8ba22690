#pragma once
// SparseHashEmbedding and the tied HashHead (SPEC 1.2), with the head's fused
// cross-entropy (SPEC 1.7), as autograd ops.
//   table: [buckets, D]  importance: [V, h]  bucket_index: [V, h] int32
#include <cstdint>

#include "autograd/variable.h"

namespace shamn {

// The initial bucket_index [V, h] int32 of SPEC 1.2:
// mix64(t + (j + 1) * 0x9E3779B97F4A7C15) mod buckets. Checkpoints carry the table;
// readers use the saved one and never call this.
Tensor hash_bucket_index(int64_t vocab, int64_t hashes, int64_t buckets);

// e(t) = sum_j importance[t, j] * table[bucket_index[t, j]]
// tokens: int32 of any shape S -> [S..., D]. Gradients flow into table and importance.
Var hash_embedding(const Var& table, const Var& importance, const Tensor& bucket_index, const Tensor& tokens);

// z: [..., D] -> logits [..., V]: s = z table^T ([..., buckets]), then
// logit[t] = sum_j importance[t, j] * s[bucket_index[t, j]]. Never forms a dense
// [V, D] matrix. Gradients flow into z, table and importance.
Var hash_head(const Var& z, const Var& table, const Var& importance, const Tensor& bucket_index);

// cross_entropy(hash_head(z, ...), targets) fused: the mean over positions of
// logsumexp(logits) - logits[target], with targets int32 of z's leading shape.
// Holds the logits of 16 rows at a time, never all [N, V]; keeps the bucket scores
// [N, buckets] and one logsumexp per row for backward, which recomputes the softmax.
// The training hot path.
Var hash_head_cross_entropy(const Var& z, const Var& table, const Var& importance, const Tensor& bucket_index,
                            const Tensor& targets);

}  // namespace shamn
