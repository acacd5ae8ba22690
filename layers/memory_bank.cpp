#include "layers/memory_bank.h"

#include <cmath>

#include "autograd/ops_product_key.h"
#include "layers/init.h"

namespace shamn {

MemoryBank::MemoryBank(const MemoryOptions& o) : options_(o) {
  o.validate();
  const int64_t n = o.sqrt_size(), dh = o.key_dim / 2;
  query_ = &register_module("query", std::make_unique<Linear>(o.dim, o.key_dim, true));
  keys1_ = register_parameter("keys1", Tensor::zeros({n, dh}));
  keys2_ = register_parameter("keys2", Tensor::zeros({n, dh}));
  values_ = register_parameter("values", Tensor::zeros({o.size, o.dim}));
}

void MemoryBank::init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {
  const int64_t half_key_dim = options_.key_dim / 2;  // each key set's width
  const double key_std = 1.0 / std::sqrt(static_cast<double>(half_key_dim));
  Tensor k1 = keys1_.value(), k2 = keys2_.value(), v = values_.value();
  init_normal(k1, seed, prefix + "keys1", key_std);
  init_normal(k2, seed, prefix + "keys2", key_std);
  init_normal(v, seed, prefix + "values", how.pick(1.0 / std::sqrt(static_cast<double>(options_.dim))));
}

Var MemoryBank::forward(const Var& u) const {
  return product_key_memory(query_->forward(u), keys1_, keys2_, values_, options_.topk);
}

Var MemoryBank::forward(const Var& u, const Var& residual) const {
  return product_key_memory(query_->forward(u), keys1_, keys2_, values_, options_.topk, residual);
}

}  // namespace shamn
