#include "layers/sparse_hash_embedding.h"

#include "autograd/ops_hash_embedding.h"
#include "layers/init.h"

namespace shamn {

SparseHashEmbedding::SparseHashEmbedding(const EmbedOptions& o) : options_(o) {
  o.validate();
  table_ = register_parameter("table", Tensor::zeros({o.buckets, o.dim}));
  importance_ = register_parameter("importance", Tensor::full({o.vocab_size, o.hashes}, 1.0));
  bucket_index_ = register_buffer("bucket_index", hash_bucket_index(o.vocab_size, o.hashes, o.buckets));
}

void SparseHashEmbedding::init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {
  Tensor t = table_.value();
  init_normal(t, seed, prefix + "table", how.pick(0.02));
  importance_.value().fill(1.0);
  bucket_index_.copy_from(hash_bucket_index(options_.vocab_size, options_.hashes, options_.buckets));
}

Var SparseHashEmbedding::forward(const Tensor& tokens) const {
  return hash_embedding(table_, importance_, bucket_index_, tokens);
}

Var SparseHashEmbedding::logits(const Var& z) const {
  return hash_head(z, table_, importance_, bucket_index_);
}

Var SparseHashEmbedding::cross_entropy(const Var& z, const Tensor& targets) const {
  return hash_head_cross_entropy(z, table_, importance_, bucket_index_, targets);
}

}  // namespace shamn
