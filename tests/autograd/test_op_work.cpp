// The FLOPs and bytes each op reports to the profiler (autograd/op_work.h), for
// small shapes, against counts worked out by hand from the conventions there
// (a multiply-add is 2 FLOPs; every operand read once, every result and gradient
// written once; f32: 4 bytes, int32 indices 4). Every op here runs for real.
#include <functional>
#include <string>

#include "autograd/ops.h"
#include "autograd/ops_block_sparse.h"
#include "autograd/ops_causal_conv.h"
#include "autograd/ops_hash_embedding.h"
#include "autograd/ops_lora.h"
#include "autograd/ops_product_key.h"
#include "core/profiler.h"
#include "helpers.h"

using namespace shamn;
using test::random_tensor;

namespace {

Var param(const Shape& shape, uint64_t seed, bool grad = true) {
  return Var(random_tensor(shape, seed, DType::f32), grad);
}

Tensor int_tensor(const Shape& shape, std::vector<int32_t> values) {
  Tensor t = Tensor::empty(shape, DType::i32);
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

// Runs f (forward and backward) with the profiler on; returns what it recorded.
ProfileReport profile_of(const std::function<void()>& f) {
  start_profiling();
  f();
  stop_profiling();
  return profile_report();
}

void check_work(const ProfileReport& r, const std::string& op, ProfileCategory c, int64_t flops,
                int64_t bytes) {
  INFO(op << " " << profile_category_name(c));
  const ProfileStat* found = nullptr;
  for (const ProfileStat& s : r.stats)
    if (s.name == op && s.category == c) found = &s;
  REQUIRE(found);
  CHECK(found->flops == flops);
  CHECK(found->bytes == bytes);
}

constexpr auto kFwd = ProfileCategory::forward;
constexpr auto kBwd = ProfileCategory::backward;

}  // namespace

TEST_CASE("op work: matmul", "[autograd][profiler][op_work]") {
  const Var x = param({2, 3}, 1, false), w = param({3, 4}, 2);
  const ProfileReport r = profile_of([&] { sum(matmul(x, w)).backward(); });
  // M=2 N=4 K=3: 2MNK = 48; A 6 + B 12 + C 8 floats.
  check_work(r, "matmul", kFwd, 48, 104);
  // dB only: 48 FLOPs; dC 8, A 6, dB 12 floats.
  check_work(r, "matmul", kBwd, 48, 104);
  // sum: 8 adds over 8 floats; backward fills 8.
  check_work(r, "sum", kFwd, 8, 32);
  check_work(r, "sum", kBwd, 0, 32);
}

TEST_CASE("op work: block-sparse linear counts active blocks", "[autograd][profiler][op_work]") {
  // in = out = 4, block 2: 2 block rows of 1 active 2x2 block each (half the blocks).
  const Var x = param({3, 4}, 3), values = param({2, 1, 2, 2}, 4), bias = param({4}, 5);
  const Tensor col_index = int_tensor({2, 1}, {0, 1});
  const ProfileReport r =
      profile_of([&] { sum(block_sparse_linear(x, values, col_index, bias, 2)).backward(); });
  // 3 rows x 2 block rows x 1 block x 4 MACs = 24 MACs = 48, + 12 bias adds;
  // x 12 + values 8 + y 12 + bias 4 floats, col_index 2 ints.
  check_work(r, "block_sparse_linear", kFwd, 60, 152);
  // dx 48 + dvalues 48 + dbias 12; dy 12, col_index 2 ints, values 8 + dx 12, x 12 +
  // dvalues 8, dbias 4 floats.
  check_work(r, "block_sparse_linear", kBwd, 108, 232);
}

TEST_CASE("op work: expert segments count routed rows only", "[autograd][profiler][op_work]") {
  const Var x = param({3, 4}, 6);
  std::vector<BlockSparseOperands> experts;
  for (uint64_t e = 0; e < 2; ++e)
    experts.push_back({param({2, 1, 2, 2}, 7 + e), int_tensor({2, 1}, {0, 1}), Var()});
  // All 3 rows go to expert 0; expert 1 gets none and is not touched.
  const ProfileReport r = profile_of([&] {
    sum(block_sparse_linear_segments(x, {0, 3, 3}, experts, 2)).backward();
  });
  // Expert 0: 48 FLOPs; x 12 + y 12 + values 8 floats, col_index 2 ints.
  check_work(r, "block_sparse_linear_segments", kFwd, 48, 136);
  // Expert 0: dx 48 + dvalues 48; dy 12, col_index 2 ints, values 8 + dx 12, x 12 + dvalues 8.
  check_work(r, "block_sparse_linear_segments", kBwd, 96, 216);
}

TEST_CASE("op work: causal conv, gelu, add, rms_norm", "[autograd][profiler][op_work]") {
  const Var u = param({1, 5, 2}, 9), conv = param({2, 3}, 10);
  const ProfileReport conv_r = profile_of([&] { sum(causal_conv(u, conv)).backward(); });
  // B*T*D = 10 outputs of K = 3 taps: 60 FLOPs; u 10 + c 10 + conv 6 floats.
  check_work(conv_r, "causal_conv", kFwd, 60, 104);
  // du 60 + dconv 60; dc 10, conv 6 + du 10, u 10 + dconv 6.
  check_work(conv_r, "causal_conv", kBwd, 120, 168);

  const Var a = param({2, 5}, 11);
  const ProfileReport gelu_r = profile_of([&] { sum(gelu(a)).backward(); });
  check_work(gelu_r, "gelu", kFwd, 100, 80);   // 10 elements x 10 FLOPs; x, y
  check_work(gelu_r, "gelu", kBwd, 190, 120);  // 10 x 19; dy, x, dx

  const Var m = param({3, 4}, 12), b = param({4}, 13);
  const ProfileReport add_r = profile_of([&] { sum(add(m, b)).backward(); });
  check_work(add_r, "add", kFwd, 12, 112);  // a 12 + b 4 + out 12 floats
  check_work(add_r, "add", kBwd, 12, 112);  // dy 12, da 12 (a copy), db 4 (12 adds)

  const Var gain = param({4}, 14);
  const ProfileReport norm_r = profile_of([&] { sum(rms_norm(m, gain)).backward(); });
  // 12 elements x 4; x 12 + out 12 + gain 4 + rstd 3 floats.
  check_work(norm_r, "rms_norm", kFwd, 48, 124);
  // dx 12 x 6 + dgain 12 x 3; dy, x, gain, rstd (31 floats), dx 12, dgain 4.
  check_work(norm_r, "rms_norm", kBwd, 108, 188);
}

TEST_CASE("op work: product-key memory counts its top-k rows", "[autograd][profiler][op_work]") {
  // N = 3 queries of 2*dh = 4; n = 4 keys per half (16 slots) of D = 3; top 2.
  const Var q = param({3, 4}, 15), k1 = param({4, 2}, 16), k2 = param({4, 2}, 17), v = param({16, 3}, 18);
  const ProfileReport r = profile_of([&] { sum(product_key_memory(q, k1, k2, v, 2)).backward(); });
  // Per query: scores 2 x 4 keys x 2 MACs x 2 = 32, top-k comparisons 8, 2*2 candidate
  // sums and their top-k 8, softmax 8, read 2 rows x 3 MACs = 12: 68 x 3 = 204.
  // q 12, keys 16, 6 value rows x 3 = 18, out 9, weights 6 floats; slots 6 ints.
  check_work(r, "product_key_memory", kFwd, 204, 268);
  // 6 pairs: dweights and softmax 6 x 10 = 60, dq 6 x 8 = 48, dkeys 48, dvalues 6 x 6 = 36.
  // dout 9, 18 value floats, 6 weights, 6 slot ints; keys 16 + dq 12; q 12 + dkeys 16; dvalues 18.
  check_work(r, "product_key_memory", kBwd, 192, 452);
}

TEST_CASE("op work: hash embedding and the fused hashed head", "[autograd][profiler][op_work]") {
  // 8 buckets of D = 4, V = 5 tokens with h = 2 hashes.
  const Var table = param({8, 4}, 19), importance = param({5, 2}, 20);
  const Tensor buckets = hash_bucket_index(5, 2, 8);
  const Tensor tokens = int_tensor({1, 3}, {0, 3, 4});
  const ProfileReport emb =
      profile_of([&] { sum(hash_embedding(table, importance, buckets, tokens)).backward(); });
  // 3 tokens x 2 hashes x 4 MACs = 48; 6 rows x 4 + importance 6 + out 12 floats;
  // 3 tokens + 6 bucket ints.
  check_work(emb, "hash_embedding", kFwd, 48, 204);
  // dtable 48 + dimportance 48; dy 12 floats + 9 ints, importance 6 + dtable rows 24,
  // table rows 24 + dimportance 6.
  check_work(emb, "hash_embedding", kBwd, 96, 324);

  const Var z = param({3, 4}, 21);
  const Tensor targets = int_tensor({3}, {1, 2, 4});
  const ProfileReport head =
      profile_of([&] { hash_head_cross_entropy(z, table, importance, buckets, targets).backward(); });
  // Scores 3 x 8 x 4 MACs = 192, logits 3 x 5 x 2 MACs = 60, softmax 4 x 15 = 60.
  // z 12 + table 32 + importance 10 + scores 24 + lse 3 floats; bucket 10 + target 3 ints.
  check_work(head, "hash_head_cross_entropy", kFwd, 312, 376);
  // dscores 60, logits again 60 + softmax 60, dz 192, dtable 192, dimportance 60.
  // scores 24 + importance 10 + lse 3 floats + bucket 10 + target 3 ints; table 32 +
  // dz 12; z 12 + dtable 32; dimportance 10.
  check_work(head, "hash_head_cross_entropy", kBwd, 624, 592);
}

TEST_CASE("op work: LoRA segments count the adapted rows", "[autograd][profiler][op_work]") {
  // Rows 0-1 through a rank-1 adapter (in 4, out 2); row 2 has no adapter.
  const Var x = param({3, 4}, 22), w = param({4, 2}, 23);
  const std::vector<LowRankOperands> adapters{{param({1, 4}, 24), param({2, 1}, 25)}, {Var(), Var()}};
  const ProfileReport r = profile_of([&] {
    sum(add_low_rank_segments(matmul(x, w), x, {0, 2, 3}, adapters, 0.5)).backward();
  });
  // t = x A^T: 2 x 1 x 4 MACs = 16; y += t B^T: 2 x 2 x 1 = 8. x 8 + A 4 + B 2 + t 2
  // + y read and written 2 x 4 floats.
  check_work(r, "add_low_rank_segments", kFwd, 24, 96);
  // dt = dy B 8; dB 8 + dA 16; dx 16. dy 4 + B 2; t 2 + dB 2 + x 8 + dA 4; A 4 + dx 8;
  // y's gradient: a copy of dy's 6 floats (read and written).
  check_work(r, "add_low_rank_segments", kBwd, 48, 184);
}

TEST_CASE("op work: nothing is recorded with the profiler off", "[autograd][profiler][op_work]") {
  start_profiling();
  stop_profiling();
  const Var x = param({2, 3}, 1), w = param({3, 4}, 2);
  sum(matmul(x, w)).backward();
  CHECK(profile_report().stats.empty());
}
