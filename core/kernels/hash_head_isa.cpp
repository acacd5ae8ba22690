// The fused hash head, compiled once per SIMD level (core/isa.h).
#include "core/kernels/hash_head.h"

#include <algorithm>
#include <limits>

#include "core/ceil_div.h"
#include "core/gemm.h"
#include "core/intrinsics.h"  // before TBB brings <immintrin.h> in (GCC bug 105593)
#include "core/kernels/elementwise.h"
#include "core/kernels/hash_head_isa.h"
#include "core/parallel.h"
#include "core/simd.h"
#include "core/tensor.h"

// The head is two steps: a GEMM into bucket scores (scores = z table^T, N x buckets,
// 20x smaller than the dense N x V product), then a gather of h weighted scores per
// token. The fused loss runs the gather, softmax and their backward on chunks of 16
// rows, one row per SIMD lane: the chunk's scores are transposed into a
// [buckets, 16] slab, so each (token, hash) pair costs one aligned 64-byte load and
// one fused multiply-add for all 16 rows, and the slab (100 KB at 1600 buckets)
// stays in L2 while the V tokens stream by.

SHAMN_ISA_BEGIN
namespace {

using simd::F;
constexpr int64_t kRows = simd::kLanes;  // rows per chunk, one per lane
constexpr int64_t kTokenBlock = 256;     // tokens whose logits a chunk keeps at once
// Chunks per partial dimportance buffer in backward. Fixed, so the partials (and
// their sum, taken in group order) do not depend on the thread count.
constexpr int64_t kGroupChunks = 16;
constexpr float kLog2e = 1.44269504088896341f;
constexpr double kLn2 = 0.693147180559945309417;

// dst[k * ld_dst + i] = src[i * ld_src + k] for i, k < 16 (whole rows and columns
// of 16): one transposed 16 x 16 block, in registers at AVX-512.
void transpose_block16(float* dst, int64_t ld_dst, const float* src, int64_t ld_src) {
#if SHAMN_ISA_SIMD == 2
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld_src);
  simd::transpose_16x16(r);
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + k * ld_dst, r[k]);
#else
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) dst[k * ld_dst + i] = src[i * ld_src + k];
#endif
}

// The buckets whose slab rows a full chunk moves in blocks of 16 (a scalar loop
// moves the rest, and every bucket of a short chunk). One float at a time the
// copies took about 3.5% of the fused loss at AVX-512 (bench_hash_head, Zen 5).
int64_t block_buckets(int64_t rows, int64_t buckets) { return rows == kRows ? buckets / 16 * 16 : 0; }

// slab[b * 16 + r] = scores[n0 + r, b]; lanes r >= rows are zero.
void load_slab(float* slab, const float* scores, int64_t n0, int64_t rows, int64_t buckets) {
  if (rows < kRows) std::fill(slab, slab + buckets * kRows, 0.0f);
  const int64_t blocked = block_buckets(rows, buckets);
  for (int64_t b0 = 0; b0 < blocked; b0 += 16)
    transpose_block16(slab + b0 * kRows, kRows, scores + n0 * buckets + b0, buckets);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = scores + (n0 + r) * buckets;
    for (int64_t b = blocked; b < buckets; ++b) slab[b * kRows + r] = src[b];
  }
}

// The inverse of load_slab for the first `rows` lanes.
void store_slab(float* scores, const float* slab, int64_t n0, int64_t rows, int64_t buckets) {
  const int64_t blocked = block_buckets(rows, buckets);
  for (int64_t b0 = 0; b0 < blocked; b0 += 16)
    transpose_block16(scores + n0 * buckets + b0, buckets, slab + b0 * kRows, kRows);
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = scores + (n0 + r) * buckets;
    for (int64_t b = blocked; b < buckets; ++b) dst[b] = slab[b * kRows + r];
  }
}

// The hashes per token: kH when it is known at compile time (the default h = 2,
// whose loops then unroll), else the run-time h.
template <int64_t kH>
inline int64_t hashes(int64_t h) {
  return kH > 0 ? kH : h;
}

// Token t's logit for the 16 rows of a slab.
inline F slab_logit(const float* slab, const float* importance, const int32_t* bucket_index, int64_t t,
                    int64_t h) {
  const float* w = importance + t * h;
  const int32_t* b = bucket_index + t * h;
  F x = simd::splat(w[0]) * simd::load(slab + static_cast<int64_t>(b[0]) * kRows);
  for (int64_t j = 1; j < h; ++j)
    x = simd::fmadd(simd::splat(w[j]), simd::load(slab + static_cast<int64_t>(b[j]) * kRows), x);
  return x;
}

// The softmax works in base 2: its logits are scaled by log2(e) through the
// importance (once a call), so each exponential is simd::exp2, four
// multiply-adds cheaper than exp: the fused loss's forward 0.89x and backward
// 0.93x in a default training step (experiments/roofline.md, stop 58).
// importance2[k] = importance[k] * log2(e) for the V * h weights.
Tensor base2_importance(const float* importance, int64_t count) {
  Tensor t = Tensor::empty({count});
  float* out = t.data<float>();
  for (int64_t k = 0; k < count; ++k) out[k] = importance[k] * kLog2e;
  return t;
}

// Lanes r < rows take src[r], the others `fill`.
F load_lanes(const float* src, int64_t rows, float fill) {
  F v = simd::splat(fill);
  for (int64_t r = 0; r < rows; ++r) v[r] = src[r];
  return v;
}

// logsumexp over all tokens of a chunk's logits, lane by lane, from the
// base-2 importance. An online softmax over blocks of tokens: the running sum
// is rescaled once per block, so each logit costs one exp2 and only a block of
// logits is ever stored. lse = ln 2 * (max + log2 sum), rounded once.
template <int64_t kH>
F chunk_logsumexp(const float* slab, const float* importance2, const int32_t* bucket_index, int64_t vocab,
                  int64_t runtime_h) {
  const int64_t h = hashes<kH>(runtime_h);
  alignas(64) F block[kTokenBlock];
  F m = simd::splat(-std::numeric_limits<float>::infinity());
  F sum = F{};
  for (int64_t t0 = 0; t0 < vocab; t0 += kTokenBlock) {
    const int64_t tn = std::min(kTokenBlock, vocab - t0);
    F bm = m;
    for (int64_t t = 0; t < tn; ++t) {
      block[t] = slab_logit(slab, importance2, bucket_index, t0 + t, h);
      bm = simd::max(bm, block[t]);
    }
    F acc0 = F{}, acc1 = F{};
    int64_t t = 0;
    for (; t + 1 < tn; t += 2) {
      acc0 += simd::exp2(block[t] - bm);
      acc1 += simd::exp2(block[t + 1] - bm);
    }
    if (t < tn) acc0 += simd::exp2(block[t] - bm);
    sum = sum * simd::exp2(m - bm) + (acc0 + acc1);
    m = bm;
  }
  F out;
  for (int r = 0; r < kRows; ++r)
    out[r] = static_cast<float>(kLn2 * (static_cast<double>(m[r]) + std::log2(static_cast<double>(sum[r]))));
  return out;
}

// Token t's p, its scatter into dslab, and emit(j, p * slab[bucket_index[t, j]])
// for each hash j (the importance's products, WantPart only).
template <int64_t kH, bool WantSlab, bool WantPart, class Emit>
[[gnu::always_inline]] inline void token_softmax_backward(float* dslab, const float* slab, F row_lse2,
                                                          F weight, const float* importance,
                                                          const float* importance2,
                                                          const int32_t* bucket_index, int64_t t, int64_t h,
                                                          Emit&& emit) {
  const float* w = importance + t * h;
  const int32_t* b = bucket_index + t * h;
  // The scores the logit read, kept for the importance's products when h is
  // known (a run-time h reads them again).
  F s[kH > 0 ? kH : 1];
  F x;
  if constexpr (kH > 0) {
    const float* w2 = importance2 + t * kH;
    s[0] = simd::load(slab + static_cast<int64_t>(b[0]) * kRows);
    x = simd::splat(w2[0]) * s[0];
#pragma GCC unroll 8
    for (int64_t j = 1; j < kH; ++j) {
      s[j] = simd::load(slab + static_cast<int64_t>(b[j]) * kRows);
      x = simd::fmadd(simd::splat(w2[j]), s[j], x);
    }
  } else {
    x = slab_logit(slab, importance2, bucket_index, t, h);
  }
  const F p = simd::exp2(x - row_lse2) * weight;
#pragma GCC unroll 8
  for (int64_t j = 0; j < h; ++j) {
    const int64_t off = static_cast<int64_t>(b[j]) * kRows;
    if constexpr (WantSlab)
      simd::store(dslab + off, simd::fmadd(simd::splat(w[j]), p, simd::load(dslab + off)));
    if constexpr (WantPart) {
      if constexpr (kH > 0)
        emit(j, p * s[j]);
      else
        emit(j, p * simd::load(slab + off));
    }
  }
}

// For one chunk, with p = weight * 2^(logit2 - row_lse2) per token (lane = row;
// logit2 = logit * log2(e) from importance2, row_lse2 = lse * log2(e)):
//   dslab[bucket_index[t, j]] += importance[t, j] * p      (dslab may be null)
//   part[t * h + j]           += sum over lanes of p * slab[bucket_index[t, j]]
// One pass over the tokens: each token's p goes to the scatter while its scores
// are still in registers, and at h = 2 the products of 16 pairs stay in
// registers for their lane sums (simd::sum16). Blocks of 256 tokens with their
// logits, then their p, stored between passes (three stores a pair where this
// makes one) took 1.37x this pass's time (experiments/roofline.md, stop 64).
// Compiled per combination of the two outputs, so the token loop tests neither,
// and for h = 2 (1.02x the head's forward and backward over the run-time h,
// bench_hash_head; the same bits).
template <int64_t kH, bool WantSlab, bool WantPart>
void chunk_softmax_backward(float* dslab, float* part, const float* slab, F row_lse2, F weight,
                            const float* importance, const float* importance2, const int32_t* bucket_index,
                            int64_t vocab, int64_t runtime_h) {
  const int64_t h = hashes<kH>(runtime_h);
  int64_t t = 0;
  if constexpr (kH > 0 && kRows % kH == 0) {
    // kRows / kH tokens make one lane sum of 16 pairs, unrolled so that the
    // products stay in registers.
    constexpr int64_t kGroup = kRows / kH;
    for (; t + kGroup <= vocab; t += kGroup) {
      F prod[kRows];
#pragma GCC unroll 16
      for (int64_t i = 0; i < kGroup; ++i)
        token_softmax_backward<kH, WantSlab, WantPart>(dslab, slab, row_lse2, weight, importance, importance2,
                                                       bucket_index, t + i, h,
                                                       [&](int64_t j, F v) { prod[i * kH + j] = v; });
      if constexpr (WantPart) simd::store(part + t * kH, simd::load(part + t * kH) + simd::sum16(prod));
    }
  }
  // The rest (all tokens for a run-time h): the pairs' products gathered 16 at a time.
  alignas(64) F prod[kRows];
  int pending = 0;
  int64_t k0 = t * h;  // first (t, j) pair of `prod`
  for (; t < vocab; ++t)
    token_softmax_backward<kH, WantSlab, WantPart>(
        dslab, slab, row_lse2, weight, importance, importance2, bucket_index, t, h, [&](int64_t, F v) {
          prod[pending++] = v;
          if (pending == kRows) {
            simd::store(part + k0, simd::load(part + k0) + simd::sum16(prod));
            k0 += kRows;
            pending = 0;
          }
        });
  if constexpr (WantPart)
    for (int i = 0; i < pending; ++i) part[k0 + i] += simd::sum(prod[i]);
}

template <int64_t kH>
void chunk_softmax_backward(float* dslab, float* part, const float* slab, F row_lse2, F weight,
                            const float* importance, const float* importance2, const int32_t* bucket_index,
                            int64_t vocab, int64_t h) {
  if (dslab && part)
    chunk_softmax_backward<kH, true, true>(dslab, part, slab, row_lse2, weight, importance, importance2,
                                           bucket_index, vocab, h);
  else if (dslab)
    chunk_softmax_backward<kH, true, false>(dslab, part, slab, row_lse2, weight, importance, importance2,
                                            bucket_index, vocab, h);
  else if (part)
    chunk_softmax_backward<kH, false, true>(dslab, part, slab, row_lse2, weight, importance, importance2,
                                            bucket_index, vocab, h);
}

void chunk_softmax_backward(float* dslab, float* part, const float* slab, F row_lse2, F weight,
                            const float* importance, const float* importance2, const int32_t* bucket_index,
                            int64_t vocab, int64_t h) {
  if (h == 2)
    chunk_softmax_backward<2>(dslab, part, slab, row_lse2, weight, importance, importance2, bucket_index,
                              vocab, h);
  else
    chunk_softmax_backward<0>(dslab, part, slab, row_lse2, weight, importance, importance2, bucket_index,
                              vocab, h);
}

F chunk_logsumexp(const float* slab, const float* importance2, const int32_t* bucket_index, int64_t vocab,
                  int64_t h) {
  return h == 2 ? chunk_logsumexp<2>(slab, importance2, bucket_index, vocab, h)
                : chunk_logsumexp<0>(slab, importance2, bucket_index, vocab, h);
}

// Logits of rows [n0, n0 + 16) and tokens [t0, t1), one row per lane: each
// (token, hash) pair is one slab load and one multiply-add for all 16 rows,
// where a row at a time gathers one score per pair. Every logit is
// slab_logit's chain, w0 s0 then + w_j s_j fused: hash_head_gather's row loop
// to the bit.
void gather16(float* logits, const float* scores, const float* importance, const int32_t* bucket_index,
              int64_t n0, int64_t t0, int64_t t1, const HashDims& d) {
  Tensor slab_buf = Tensor::empty({d.buckets * kRows});
  float* slab = slab_buf.data<float>();
  load_slab(slab, scores, n0, kRows, d.buckets);
  alignas(64) float block[16 * kRows];  // [token][row]
  for (int64_t t = t0; t < t1; t += 16) {
    const int64_t tn = std::min<int64_t>(16, t1 - t);
    for (int64_t i = 0; i < tn; ++i)
      simd::store(block + i * kRows, slab_logit(slab, importance, bucket_index, t + i, d.hashes));
    float* out = logits + n0 * d.vocab + t;
    if (tn == 16) {
      transpose_block16(out, d.vocab, block, kRows);
    } else {
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t i = 0; i < tn; ++i) out[r * d.vocab + i] = block[i * kRows + r];
    }
  }
}

void bucket_scores(float* scores, const float* z, const float* table, int64_t n, const HashDims& d,
                   ProductPrecision p) {
  gemm(Trans::no, Trans::yes, n, d.buckets, d.dim, 1.0f, z, d.dim, table, d.dim, 0.0f, scores, d.buckets, p);
}

// dz += ds table, dtable += ds^T z   (ds: [N, buckets])
void bucket_scores_backward(float* dz, float* dtable, const float* ds, const float* z, const float* table,
                            int64_t n, const HashDims& d, ProductPrecision p) {
  if (dz)
    gemm(Trans::no, Trans::no, n, d.dim, d.buckets, 1.0f, ds, d.buckets, table, d.dim, 1.0f, dz, d.dim, p);
  if (dtable)
    gemm(Trans::yes, Trans::no, d.buckets, d.dim, n, 1.0f, ds, d.buckets, z, d.dim, 1.0f, dtable, d.dim, p);
}

}  // namespace

void hash_head_forward(float* logits, float* scores, const float* z, const float* table,
                       const float* importance, const int32_t* bucket_index, int64_t n, const HashDims& d,
                       ProductPrecision p) {
  bucket_scores(scores, z, table, n, d, p);
  ::shamn::hash_head_gather(logits, scores, importance, bucket_index, n, d);
}

void hash_head_backward(float* dz, float* dtable, float* dimportance, const float* dlogits,
                        const float* scores, const float* z, const float* table, const float* importance,
                        const int32_t* bucket_index, int64_t n, const HashDims& d, ProductPrecision p) {
  const int64_t h = d.hashes;
  if (dimportance) {
    // Each task owns a block of tokens and adds the rows in order.
    constexpr int64_t kTokens = 512;
    parallel_for(0, ceil_div(d.vocab, kTokens), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t t0 = blk * kTokens, t1 = std::min(d.vocab, t0 + kTokens);
        for (int64_t r = 0; r < n; ++r) {
          const float* dl = dlogits + r * d.vocab;
          const float* s = scores + r * d.buckets;
          for (int64_t t = t0; t < t1; ++t)
            for (int64_t j = 0; j < h; ++j) dimportance[t * h + j] += dl[t] * s[bucket_index[t * h + j]];
        }
      }
    });
  }
  if (!dz && !dtable) return;
  Tensor ds_buf = Tensor::zeros({n, d.buckets});
  float* ds = ds_buf.data<float>();
  parallel_for(0, n, row_grain(d.vocab * h), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* dl = dlogits + r * d.vocab;
      float* dsr = ds + r * d.buckets;
      for (int64_t t = 0; t < d.vocab; ++t)
        for (int64_t j = 0; j < h; ++j) dsr[bucket_index[t * h + j]] += importance[t * h + j] * dl[t];
    }
  });
  bucket_scores_backward(dz, dtable, ds, z, table, n, d, p);
}

// loss[r] = lse[r] - logit[r, targets[r]] from bucket scores [n, buckets], 16 rows
// per chunk (lse may be null).
void row_losses_from_scores(double* loss, float* lse, const float* scores, const float* importance,
                            const int32_t* bucket_index, const int32_t* targets, int64_t n,
                            const HashDims& d) {
  const int64_t h = d.hashes, chunks = ceil_div(n, kRows);
  const Tensor importance2 = base2_importance(importance, d.vocab * h);
  parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    Tensor slab_buf = Tensor::empty({d.buckets * kRows});
    float* slab = slab_buf.data<float>();
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t n0 = c * kRows, rows = std::min(kRows, n - n0);
      load_slab(slab, scores, n0, rows, d.buckets);
      const F row_lse = chunk_logsumexp(slab, importance2.data<float>(), bucket_index, d.vocab, h);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t tgt = targets[n0 + r];
        float x = 0.0f;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t off = static_cast<int64_t>(bucket_index[tgt * h + j]) * kRows + r;
          x += importance[tgt * h + j] * slab[off];
        }
        if (lse) lse[n0 + r] = row_lse[r];
        // lse >= the target's logit, but lse went through base 2 and float rounding
        // and x did not: on a row the model gets right with certainty the difference
        // can round below zero (by an ulp of lse), which a cross-entropy never is.
        // (The difference first: std::max passes a NaN through only as its first argument.)
        loss[n0 + r] = std::max(static_cast<double>(row_lse[r]) - x, 0.0);
      }
    }
  });
}

double hash_head_cross_entropy_forward(float* lse, float* scores, const float* z, const float* table,
                                       const float* importance, const int32_t* bucket_index,
                                       const int32_t* targets, int64_t n, const HashDims& d,
                                       ProductPrecision p) {
  bucket_scores(scores, z, table, n, d, p);
  std::vector<double> row_loss(static_cast<size_t>(n));
  row_losses_from_scores(row_loss.data(), lse, scores, importance, bucket_index, targets, n, d);
  double total = 0.0;  // in row order: the same for any thread count
  for (double l : row_loss) total += l;
  return total / static_cast<double>(n);
}

void hash_head_cross_entropy_backward(float* dz, float* dtable, float* dimportance, float dloss,
                                      const float* lse, const float* scores, const float* z,
                                      const float* table, const float* importance,
                                      const int32_t* bucket_index, const int32_t* targets, int64_t n,
                                      const HashDims& d, ProductPrecision p) {
  const bool want_ds = dz || dtable;
  if (!want_ds && !dimportance) return;
  const int64_t h = d.hashes, vh = d.vocab * h, chunks = ceil_div(n, kRows);
  const int64_t groups = ceil_div(chunks, kGroupChunks);
  const float g = static_cast<float>(static_cast<double>(dloss) / static_cast<double>(n));
  Tensor ds_buf = want_ds ? Tensor::empty({n, d.buckets}) : Tensor();
  Tensor partial_buf = dimportance ? Tensor::zeros({groups, vh}) : Tensor();
  float* ds = want_ds ? ds_buf.data<float>() : nullptr;
  const Tensor importance2 = base2_importance(importance, vh);

  parallel_for(0, groups, 1, [&](int64_t glo, int64_t ghi) {
    Tensor slab_buf = Tensor::empty({2, d.buckets * kRows});
    float* slab = slab_buf.data<float>();
    float* dslab = slab + d.buckets * kRows;
    for (int64_t grp = glo; grp < ghi; ++grp) {
      float* part = dimportance ? partial_buf.data<float>() + grp * vh : nullptr;
      const int64_t c_end = std::min(chunks, (grp + 1) * kGroupChunks);
      for (int64_t c = grp * kGroupChunks; c < c_end; ++c) {
        const int64_t n0 = c * kRows, rows = std::min(kRows, n - n0);
        load_slab(slab, scores, n0, rows, d.buckets);
        if (want_ds) std::fill(dslab, dslab + d.buckets * kRows, 0.0f);
        // Padding lanes get lse 0 and weight 0: their (zero) logits add nothing.
        F row_lse2 = load_lanes(lse + n0, rows, 0.0f);
        for (int64_t r = 0; r < rows; ++r)
          row_lse2[r] = static_cast<float>(static_cast<double>(row_lse2[r]) / kLn2);
        F weight = simd::splat(g);
        for (int64_t r = rows; r < kRows; ++r) weight[r] = 0.0f;
        // dlogit = g * softmax; the -g at each row's target is applied below.
        chunk_softmax_backward(want_ds ? dslab : nullptr, part, slab, row_lse2, weight, importance,
                               importance2.data<float>(), bucket_index, d.vocab, h);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t tgt = targets[n0 + r];
          for (int64_t j = 0; j < h; ++j) {
            const int64_t off = static_cast<int64_t>(bucket_index[tgt * h + j]) * kRows + r;
            if (want_ds) dslab[off] -= g * importance[tgt * h + j];
            if (part) part[tgt * h + j] -= g * slab[off];
          }
        }
        if (want_ds) store_slab(ds, dslab, n0, rows, d.buckets);
      }
    }
  });

  if (dimportance) {
    const float* partial = partial_buf.data<float>();
    parallel_for(0, vh, kElementGrain / 4, [&](int64_t lo, int64_t hi) {
      for (int64_t grp = 0; grp < groups; ++grp)
        for (int64_t k = lo; k < hi; ++k) dimportance[k] += partial[grp * vh + k];
    });
  }
  if (want_ds) bucket_scores_backward(dz, dtable, ds, z, table, n, d, p);
}

SHAMN_ISA_END

namespace shamn::hash_head_isa {
SHAMN_ISA_TABLE(Kernels) = {&::shamn::SHAMN_ISA_NS::hash_head_forward,
                            &::shamn::SHAMN_ISA_NS::hash_head_backward,
                            &::shamn::SHAMN_ISA_NS::hash_head_cross_entropy_forward,
                            &::shamn::SHAMN_ISA_NS::hash_head_cross_entropy_backward,
                            &::shamn::SHAMN_ISA_NS::row_losses_from_scores,
                            &::shamn::SHAMN_ISA_NS::gather16};
}  // namespace shamn::hash_head_isa
