// The tied head's loss at default's training shape (N = 49,152 tokens: 96 x 512;
// V = 32,000, buckets = 1,600, D = 512, h = 2) in its pieces, on THREADS threads:
//   scores gemm   s [N, buckets] = z [N, D] table^T            (the forward's product)
//   dz gemm       dz [N, D] += ds [N, buckets] table [buckets, D]
//   dtable gemm   dtable [buckets, D] += ds^T z                (a long reduction over N)
//   fused fwd / fwd+bwd   hash_head_cross_entropy, without and with its backward
// and what the backward spends outside its two products. Each figure is the median
// of 3 runs after a warm-up, in ms. Not a Google Benchmark: at this shape one run
// takes seconds on one thread, and the pieces are wanted side by side per thread
// count (experiments/thread_scaling.md, run 9).
//
//   bench_head_pieces THREADS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops_hash_embedding.h"
#include "core/gemm.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace {

constexpr int64_t kN = 49152, kV = 32000, kBuckets = 1600, kD = 512, kH = 2;

template <class F>
double median_ms(F&& f) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[1];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: bench_head_pieces THREADS\n");
    return 2;
  }
  using namespace shamn;
  const int threads = std::atoi(argv[1]);
  set_num_threads(threads);
  Rng rng(7, 0);
  auto uniform = [&](const Shape& shape, double lo, double hi) {
    Tensor t = Tensor::empty(shape);
    rng.fill_uniform(t, lo, hi);
    return t;
  };
  Var z(uniform({kN, kD}, -1, 1), true), table(uniform({kBuckets, kD}, -0.05, 0.05), true),
      importance(uniform({kV, kH}, 0.5, 1.5), true);
  const Tensor bucket_index = hash_bucket_index(kV, kH, kBuckets);
  Tensor targets = Tensor::empty({kN}, DType::i32);
  for (int64_t i = 0; i < kN; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>(rng.below(kV));
  Tensor s = uniform({kN, kBuckets}, -0.01, 0.01), dz = Tensor::zeros({kN, kD}),
         dtable = Tensor::zeros({kBuckets, kD});
  const float* zp = z.value().data<float>();
  const float* tp = table.value().data<float>();
  float* sp = s.data<float>();

  const double scores = median_ms(
      [&] { gemm(Trans::no, Trans::yes, kN, kBuckets, kD, 1.0f, zp, kD, tp, kD, 0.0f, sp, kBuckets); });
  const double dz_ms = median_ms([&] {
    gemm(Trans::no, Trans::no, kN, kD, kBuckets, 1.0f, sp, kBuckets, tp, kD, 1.0f, dz.data<float>(), kD);
  });
  const double dtable_ms = median_ms([&] {
    gemm(Trans::yes, Trans::no, kBuckets, kD, kN, 1.0f, sp, kBuckets, zp, kD, 1.0f, dtable.data<float>(), kD);
  });
  double forward = 0.0;
  {
    const NoGradGuard no_grad;
    forward = median_ms(
        [&] { const Var loss = hash_head_cross_entropy(z, table, importance, bucket_index, targets); });
  }
  const double both = median_ms([&] {
    Var loss = hash_head_cross_entropy(z, table, importance, bucket_index, targets);
    loss.backward();
  });
  std::printf(
      "threads %d | scores gemm %.1f | dz gemm %.1f | dtable gemm %.1f | fused fwd %.1f | fused fwd+bwd %.1f "
      "| "
      "bwd %.1f | bwd - dz - dtable %.1f ms\n",
      threads, scores, dz_ms, dtable_ms, forward, both, both - forward, both - forward - dz_ms - dtable_ms);
  return 0;
}
