#include "autograd/ops_hash_embedding.h"

#include "autograd/dispatch.h"
#include "autograd/op_work.h"
#include "core/kernels/hash_embedding.h"
#include "core/kernels/hash_head.h"
#include "core/product_precision.h"
#include "core/profiler.h"

namespace shamn {
namespace {

// Checks the shared operands of every op here and returns their dims.
HashDims hash_dims(const char* op, const Var& table, const Var& importance, const Tensor& bucket_index) {
  SHAMN_CHECK(table.dim() == 2, op, ": table must be [buckets, D], got ", table.value().str());
  SHAMN_CHECK(importance.dim() == 2, op, ": importance must be [V, h], got ", importance.value().str());
  SHAMN_CHECK(bucket_index.defined() && bucket_index.dtype() == DType::i32 &&
                  bucket_index.shape() == importance.shape(),
              op, ": bucket_index must be int32 of importance's shape ", importance.value().str(), ", got ",
              bucket_index.defined() ? bucket_index.str() : "an undefined tensor");
  SHAMN_CHECK(table.dtype() == importance.dtype(), op, ": table is ", dtype_name(table.dtype()),
              " but importance is ", dtype_name(importance.dtype()));
  HashDims d;
  d.buckets = table.size(0);
  d.dim = table.size(1);
  d.vocab = importance.size(0);
  d.hashes = importance.size(1);
  SHAMN_CHECK(d.hashes >= 1, op, ": importance has no hash columns");
  check_hash_buckets(bucket_index.data<int32_t>(), d, op);
  return d;
}

void check_z(const char* op, const Var& z, const Var& table) {
  SHAMN_CHECK(z.dim() >= 1 && z.size(-1) == table.size(1), op, ": z ", z.value().str(),
              " does not end in the table's width ", table.size(1));
  SHAMN_CHECK(z.dtype() == table.dtype(), op, ": z is ", dtype_name(z.dtype()), " but the table is ",
              dtype_name(table.dtype()));
}

}  // namespace

Tensor hash_bucket_index(int64_t vocab, int64_t hashes, int64_t buckets) {
  SHAMN_CHECK(vocab >= 0 && hashes >= 1,
              "hash_bucket_index: needs a vocabulary size >= 0 and at least one hash, got V=", vocab,
              " h=", hashes);
  Tensor out = Tensor::empty({vocab, hashes}, DType::i32);
  hash_bucket_index_fill(out.data<int32_t>(), vocab, hashes, buckets);
  return out;
}

Var hash_embedding(const Var& table, const Var& importance, const Tensor& bucket_index,
                   const Tensor& tokens) {
  const ProfileScope profile("hash_embedding", ProfileCategory::forward);
  const HashDims d = hash_dims("hash_embedding", table, importance, bucket_index);
  SHAMN_CHECK(tokens.defined() && tokens.dtype() == DType::i32,
              "hash_embedding: tokens must be an int32 tensor, got ",
              tokens.defined() ? tokens.str() : "an undefined tensor");
  const int64_t n = tokens.numel();
  check_hash_tokens(tokens.data<int32_t>(), n, d.vocab, "hash_embedding", "token");
  Shape out_shape = tokens.shape();
  out_shape.push_back(d.dim);
  const int64_t s = static_cast<int64_t>(dtype_size(table.dtype()));
  record_work(op_work::hash_embedding_forward(n, d, s));
  Tensor out = Tensor::empty(out_shape, table.dtype());
  const Tensor tv = table.value(), iv = importance.value();
  dispatch_floating(table.dtype(), "hash_embedding", [&](auto zero) {
    using T = decltype(zero);
    const int32_t* bi = bucket_index.data<int32_t>();
    const int32_t* tok = tokens.data<int32_t>();
    hash_embedding_forward(out.data<T>(), tv.data<T>(), iv.data<T>(), bi, tok, n, d);
  });
  return record("hash_embedding", out, {table, importance}, [=](Node& node) {
    record_work(op_work::hash_embedding_backward(n, d, s, {node.needs_grad(0), node.needs_grad(1)}));
    dispatch_floating(node.out_dtype, "hash_embedding", [&](auto zero) {
      using T = decltype(zero);
      const T* dy = node.out_grad.data<T>();
      const int32_t* bi = bucket_index.data<int32_t>();
      const int32_t* tok = tokens.data<int32_t>();
      if (node.needs_grad(0))
        hash_embedding_backward_table(node.input_grad(0).data<T>(), dy, iv.data<T>(), bi, tok, n, d);
      if (node.needs_grad(1))
        hash_embedding_backward_importance(node.input_grad(1).data<T>(), dy, tv.data<T>(), bi, tok, n, d);
    });
  });
}

Var hash_head(const Var& z, const Var& table, const Var& importance, const Tensor& bucket_index) {
  const ProfileScope profile("hash_head", ProfileCategory::forward);
  const HashDims d = hash_dims("hash_head", table, importance, bucket_index);
  check_z("hash_head", z, table);
  const int64_t n = z.numel() / d.dim;
  Shape out_shape = z.shape();
  out_shape.back() = d.vocab;
  const int64_t s = static_cast<int64_t>(dtype_size(z.dtype()));
  record_work(op_work::hash_head_forward(n, d, s, /*fused=*/false));
  Tensor logits = Tensor::empty(out_shape, z.dtype());
  Tensor scores = Tensor::empty({n, d.buckets}, z.dtype());
  const Tensor zv = z.value(), tv = table.value(), iv = importance.value();
  dispatch_floating(z.dtype(), "hash_head", [&](auto zero) {
    using T = decltype(zero);
    const int32_t* bi = bucket_index.data<int32_t>();
    hash_head_forward(logits.data<T>(), scores.data<T>(), zv.data<T>(), tv.data<T>(), iv.data<T>(), bi, n, d,
                      product_precision());
  });
  return record("hash_head", logits, {z, table, importance}, [=](Node& node) {
    record_work(op_work::hash_head_backward(n, d, s, /*fused=*/false,
                                            {node.needs_grad(0), node.needs_grad(1), node.needs_grad(2)}));
    dispatch_floating(node.out_dtype, "hash_head", [&](auto zero) {
      using T = decltype(zero);
      T* dz = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      T* dt = node.needs_grad(1) ? node.input_grad(1).data<T>() : nullptr;
      T* di = node.needs_grad(2) ? node.input_grad(2).data<T>() : nullptr;
      const int32_t* bi = bucket_index.data<int32_t>();
      hash_head_backward(dz, dt, di, node.out_grad.data<T>(), scores.data<T>(), zv.data<T>(), tv.data<T>(),
                         iv.data<T>(), bi, n, d, product_precision());
    });
  });
}

Var hash_head_cross_entropy(const Var& z, const Var& table, const Var& importance, const Tensor& bucket_index,
                            const Tensor& targets) {
  const ProfileScope profile("hash_head_cross_entropy", ProfileCategory::forward);
  const char* op = "hash_head_cross_entropy";
  const HashDims d = hash_dims(op, table, importance, bucket_index);
  check_z(op, z, table);
  SHAMN_CHECK(targets.defined() && targets.dtype() == DType::i32, op,
              ": targets must be an int32 tensor, got ",
              targets.defined() ? targets.str() : "an undefined tensor");
  SHAMN_CHECK(Shape(z.shape().begin(), z.shape().end() - 1) == targets.shape(), op, ": z ", z.value().str(),
              " does not match targets ", targets.str());
  const int64_t n = targets.numel();
  SHAMN_CHECK(n > 0, op, " over zero positions");
  check_hash_tokens(targets.data<int32_t>(), n, d.vocab, op, "target");
  const int64_t s = static_cast<int64_t>(dtype_size(z.dtype()));
  record_work(op_work::hash_head_forward(n, d, s, /*fused=*/true));
  Tensor lse = Tensor::empty({n}, z.dtype());
  Tensor out = Tensor::empty({}, z.dtype());
  // The f32 path keeps the bucket scores for backward; the f64 oracle recomputes them
  // (and leaves these unset).
  Tensor scores = Tensor::empty({n, d.buckets}, z.dtype());
  const Tensor zv = z.value(), tv = table.value(), iv = importance.value();
  dispatch_floating(z.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int32_t* bi = bucket_index.data<int32_t>();
    const int32_t* tg = targets.data<int32_t>();
    const double loss =
        hash_head_cross_entropy_forward(lse.data<T>(), scores.data<T>(), zv.data<T>(), tv.data<T>(),
                                        iv.data<T>(), bi, tg, n, d, product_precision());
    out.data<T>()[0] = static_cast<T>(loss);
  });
  return record(op, out, {z, table, importance}, [=](Node& node) {
    record_work(op_work::hash_head_backward(n, d, s, /*fused=*/true,
                                            {node.needs_grad(0), node.needs_grad(1), node.needs_grad(2)}));
    dispatch_floating(node.out_dtype, op, [&](auto zero) {
      using T = decltype(zero);
      T* dz = node.needs_grad(0) ? node.input_grad(0).data<T>() : nullptr;
      T* dt = node.needs_grad(1) ? node.input_grad(1).data<T>() : nullptr;
      T* di = node.needs_grad(2) ? node.input_grad(2).data<T>() : nullptr;
      const T dloss = node.out_grad.data<T>()[0];
      const int32_t* bi = bucket_index.data<int32_t>();
      const int32_t* tg = targets.data<int32_t>();
      hash_head_cross_entropy_backward(dz, dt, di, dloss, lse.data<T>(), scores.data<T>(), zv.data<T>(),
                                       tv.data<T>(), iv.data<T>(), bi, tg, n, d, product_precision());
    });
  });
}

}  // namespace shamn
