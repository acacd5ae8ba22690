// Every layer's forward pass against a slow, obvious reference: the SPEC's
// formula read literally, in double, in plain loops over the layer's own
// parameters and index buffers (no project kernel or op), compared with the
// layer's f32 output. The gradient checks (test_layers.cpp, test_lora.cpp)
// cannot see a forward bug that the backward mirrors; these can.
//
// Tolerances. Parameters and inputs are f32 numbers (exact in double), so the
// only difference is the layer's f32 round-off, u = 2^-24 = 6e-8 per operation.
// Every output here is a sum of at most ~100 terms whose absolute values add up
// to a few units at most; f32 summation errs by at most n*u*sum|terms| (Higham,
// Accuracy and Stability, 3.1) in any order, with or without FMA: 1e-5 to 3e-5
// in the worst case, ~1e-6 in practice (rounding errors grow like sqrt(n); the
// largest seen here, at every kernel level, is 1.2e-6). Each test's tolerance
// (1e-6 to 2e-5) is set from its own sizes, in a comment beside it; an error
// >= 1e-4 is a bug, not round-off. The mutations these tests
// were proved against (a dropped epsilon, a skipped bias, a swapped index) give
// errors of 0.1 to 8.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "helpers.h"
#include "layers/block_sparse_linear.h"
#include "layers/causal_conv_mixer.h"
#include "layers/linear.h"
#include "layers/memory_bank.h"
#include "layers/rms_norm.h"
#include "layers/sparse_hash_embedding.h"

using namespace shamn;

namespace {

using Vec = std::vector<double>;

Vec doubles(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.item(i);
  return v;
}

// Every parameter and buffer of a module by its dotted name, as doubles
// (int32 index buffers convert exactly).
std::map<std::string, Vec> tensors_of(const Module& m) {
  std::map<std::string, Vec> out;
  for (const NamedVar& p : m.named_parameters()) out[p.name] = doubles(p.var.value());
  for (const NamedTensor& b : m.named_buffers()) out[b.name] = doubles(b.tensor);
  return out;
}

// Overwrites the parameters whose names end with `suffix` with U(lo, hi): the
// layers initialise biases and LoRA's B to zero and gains to one, which would
// hide a skipped bias, adapter or gain.
void randomise(Module& m, const std::string& suffix, uint64_t seed, double lo = -1, double hi = 1) {
  int found = 0;
  for (NamedVar& p : m.named_parameters())
    if (p.name.ends_with(suffix)) {
      p.var.value().copy_from(test::random_tensor(p.var.shape(), seed++, DType::f32, lo, hi));
      ++found;
    }
  REQUIRE(found > 0);
}

// Largest |got - want| over the layer's f32 output.
double max_error(const Var& got, const Vec& want) {
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  double m = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    m = test::worse(m, std::abs(got.value().item(i) - want[static_cast<size_t>(i)]));
  return m;
}

#define CHECK_CLOSE(got, want, tol)                     \
  do {                                                  \
    const double err_ = max_error((got), (want));       \
    INFO(#got " vs reference: max abs error " << err_); \
    CHECK(err_ <= (tol));                               \
  } while (0)

Vec plus(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// ---- SPEC formulas -------------------------------------------------------

// SPEC 1.1: y = x / sqrt(mean(x^2) + 1e-5) * gain, over the last dim.
Vec rms_norm_ref(const Vec& x, const Vec& gain, int64_t dim) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / dim; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < dim; ++d) ss += x[r * dim + d] * x[r * dim + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + 1e-5);
    for (int64_t d = 0; d < dim; ++d) y[r * dim + d] = x[r * dim + d] * inv * gain[d];
  }
  return y;
}

// y = x W^T (+ bias), W [out, in] row-major; bias empty: none.
Vec linear_ref(const Vec& x, const Vec& w, const Vec& bias, int64_t in, int64_t out) {
  const size_t rows = x.size() / in;
  Vec y(rows * out);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

// SPEC 1.3: the dense W [out, in] of a block-sparse layer,
// W[r*b + i, col_index[r, m]*b + k] = values[r, m, i, k], zero elsewhere.
Vec block_sparse_dense(const Vec& values, const Vec& col_index, int64_t in, int64_t out, int64_t b) {
  const int64_t nob = out / b, a = static_cast<int64_t>(col_index.size()) / nob;
  Vec w(static_cast<size_t>(out * in), 0.0);
  for (int64_t r = 0; r < nob; ++r)
    for (int64_t m = 0; m < a; ++m) {
      const int64_t c = static_cast<int64_t>(col_index[r * a + m]);
      for (int64_t i = 0; i < b; ++i)
        for (int64_t k = 0; k < b; ++k)
          w[(r * b + i) * in + c * b + k] = values[((r * a + m) * b + i) * b + k];
    }
  return w;
}

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

Vec activate(Vec x, InputActivation act) {
  for (double& v : x)
    v = act == InputActivation::silu ? silu_ref(v) : act == InputActivation::gelu ? gelu_ref(v) : v;
  return x;
}

// LoRA (layers/lora.h): scale * B (A x), A [rank, in], B [out, rank].
Vec lora_ref(const Vec& x, const Vec& a, const Vec& b, int64_t in, int64_t out, double scale) {
  const int64_t rank = static_cast<int64_t>(a.size()) / in;
  Vec ax = linear_ref(x, a, {}, in, rank), y = linear_ref(ax, b, {}, rank, out);
  for (double& v : y) v *= scale;
  return y;
}

// SPEC 1.4: c[t, d] = sum_i conv[d, i] * u[t - i, d] per sequence, then out(silu(c)).
Vec mixer_ref(const Vec& u, std::map<std::string, Vec>& p, int64_t B, int64_t T, int64_t D, int64_t K,
              int64_t block) {
  Vec c(u.size(), 0.0);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < K && i <= t; ++i)
          c[(s * T + t) * D + d] += p["conv"][d * K + i] * u[(s * T + t - i) * D + d];
  const Vec w = block_sparse_dense(p["out.values"], p["out.col_index"], D, D, block);
  return linear_ref(activate(c, InputActivation::silu), w, p["out.bias"], D, D);
}

// The first k positions of `score` by value, descending; ties to the lower position.
std::vector<int64_t> top_k(const Vec& score, int64_t k) {
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

// The gap between the k-th and (k+1)-th largest (infinite when there is none).
double top_k_margin(Vec score, int64_t k) {
  if (static_cast<int64_t>(score.size()) <= k) return INFINITY;
  std::sort(score.begin(), score.end(), std::greater<>());
  return score[k - 1] - score[k];
}

// SPEC 1.5, one token at a time. `margin` gets the smallest gap at any of the
// three top-k boundaries, so that the caller can tell f32 round-off cannot flip
// a selection.
Vec memory_ref(const Vec& u, std::map<std::string, Vec>& p, const MemoryOptions& o, double* margin) {
  const int64_t D = o.dim, n = o.sqrt_size(), dh = o.key_dim / 2, k = o.topk;
  const size_t rows = u.size() / D;
  const Vec q_all = linear_ref(u, p["query.weight"], p["query.bias"], D, 2 * dh);
  Vec y(rows * D, 0.0);
  *margin = INFINITY;
  for (size_t r = 0; r < rows; ++r) {
    Vec s1(n, 0.0), s2(n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < dh; ++j) {
        s1[i] += p["keys1"][i * dh + j] * q_all[r * 2 * dh + j];
        s2[i] += p["keys2"][i * dh + j] * q_all[r * 2 * dh + dh + j];
      }
    const std::vector<int64_t> I = top_k(s1, k), J = top_k(s2, k);
    // The k*k candidates, ordered by slot id so that top_k's ties go to the lower slot.
    std::vector<std::pair<int64_t, double>> cand;
    for (int64_t a = 0; a < k; ++a)
      for (int64_t c = 0; c < k; ++c) cand.push_back({I[a] * n + J[c], s1[I[a]] + s2[J[c]]});
    std::sort(cand.begin(), cand.end());
    Vec cand_score;
    for (const auto& [slot, score] : cand) cand_score.push_back(score);
    const std::vector<int64_t> best = top_k(cand_score, k);
    *margin = std::min({*margin, top_k_margin(s1, k), top_k_margin(s2, k), top_k_margin(cand_score, k)});
    double mx = -INFINITY, z = 0;
    for (int64_t m : best) mx = std::max(mx, cand_score[m]);
    for (int64_t m : best) z += std::exp(cand_score[m] - mx);
    for (int64_t m : best) {
      const double w = std::exp(cand_score[m] - mx) / z;
      const int64_t slot = cand[m].first;
      for (int64_t d = 0; d < D; ++d) y[r * D + d] += w * p["values"][slot * D + d];
    }
  }
  return y;
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

TEST_CASE("RMSNorm matches SPEC 1.1's formula", "[layers][reference]") {
  for (int64_t dim : {1, 13, 64}) {
    DYNAMIC_SECTION("dim " << dim) {
      RMSNorm norm(dim);
      norm.init(1);
      randomise(norm, "gain", 2, -2, 2);
      Tensor x = test::random_tensor({3, 4, dim}, 3, DType::f32, -2, 2);
      // Row 1 tiny (mean(x^2) ~ 3e-7, well below the epsilon, which then sets the
      // scale) and row 2 zero (output 0, not NaN): without the 1e-5 they differ.
      for (int64_t d = 0; d < dim; ++d) {
        x.set_item(dim + d, x.item(dim + d) * 1e-3);
        x.set_item(2 * dim + d, 0.0);
      }
      NoGradGuard no_grad;
      const Var y = norm.forward(Var(x));
      CHECK(y.shape() == x.shape());
      // Relative error <= D*u/2 (the mean of squares) + a few u (rsqrt, products):
      // ~2e-6 at D = 64 on outputs of magnitude <= ~4.
      CHECK_CLOSE(y, rms_norm_ref(doubles(x), tensors_of(norm)["gain"], dim), 1e-5);
    }
  }
}

TEST_CASE("Linear matches y = x W^T + bias", "[layers][reference]") {
  for (auto [in, out, bias] : {std::tuple{7, 5, true}, std::tuple{33, 17, true}, std::tuple{64, 3, false},
                               std::tuple{64, 48, true}}) {
    DYNAMIC_SECTION("in " << in << " out " << out << " bias " << bias) {
      Linear lin(in, out, bias);
      lin.init(4);
      if (bias) randomise(lin, "bias", 5);
      const Tensor x = test::random_tensor({4, 10, in}, 6, DType::f32);
      NoGradGuard no_grad;
      const Var y = lin.forward(Var(x));
      CHECK(y.shape() == Shape{4, 10, out});
      auto p = tensors_of(lin);
      // <= 65 terms, weights N(0, 1/in): sum|terms| <~ 2, so <= 65 u 2 = 8e-6.
      CHECK_CLOSE(y, linear_ref(doubles(x), p["weight"], bias ? p["bias"] : Vec{}, in, out), 1e-5);
    }
  }
}

TEST_CASE("BlockSparseLinear matches the dense W of SPEC 1.3 built from values and col_index",
          "[layers][reference]") {
  struct Case {
    int64_t in, out, block;
    double sparsity;
  };
  // Active blocks a = max(1, round((1 - s) * in / b)): 2 of 3, 1 of 4, 3 of 6, 4 of 4
  // (dense), 3 of 6, 1 of 4. Blocks of 8 take the kernels' plain loops, multiples
  // of 16 the packed SIMD tiles (narrow and, at 32, wide ones under AVX-512).
  for (const Case c : {Case{24, 16, 8, 0.5}, Case{32, 48, 8, 0.75}, Case{48, 24, 8, 0.5},
                       Case{64, 32, 16, 0.0}, Case{96, 64, 16, 0.5}, Case{128, 64, 32, 0.75}}) {
    DYNAMIC_SECTION("in " << c.in << " out " << c.out << " block " << c.block << " sparsity " << c.sparsity) {
      BlockSparseLinear bsl({c.in, c.out, c.block, c.sparsity, true, "model.sparse.sparsity"});
      bsl.init(7);
      randomise(bsl, "bias", 8);
      const int64_t nib = c.in / c.block, nob = c.out / c.block;
      const int64_t a = std::max<int64_t>(1, std::llround((1 - c.sparsity) * static_cast<double>(nib)));
      auto p = tensors_of(bsl);
      // The pattern the layer drew: [nob, a], each row distinct and ascending, in range.
      REQUIRE(bsl.col_index().shape() == Shape{nob, a});
      for (int64_t r = 0; r < nob; ++r)
        for (int64_t m = 0; m < a; ++m) {
          CHECK(p["col_index"][r * a + m] >= 0);
          CHECK(p["col_index"][r * a + m] < nib);
          if (m > 0) CHECK(p["col_index"][r * a + m] > p["col_index"][r * a + m - 1]);
        }
      // 38 rows: several row tiles, the last one partial.
      const Tensor x = test::random_tensor({2, 19, c.in}, 9, DType::f32, -2, 2);
      const Tensor res = test::random_tensor({2, 19, c.out}, 10, DType::f32);
      const Vec w = block_sparse_dense(p["values"], p["col_index"], c.in, c.out, c.block);
      NoGradGuard no_grad;
      // <= 64 terms, values N(0, 1/(a b)), |x| <= 2: sum|terms| <~ 4, <= 64 u 4 = 1.5e-5
      // at worst (gelu and silu add a few u relative); ~1e-6 in practice.
      for (InputActivation act : {InputActivation::none, InputActivation::silu, InputActivation::gelu}) {
        INFO("activation " << static_cast<int>(act));
        const Vec want = linear_ref(activate(doubles(x), act), w, p["bias"], c.in, c.out);
        CHECK_CLOSE(bsl.forward(Var(x), act), want, 2e-5);
        CHECK_CLOSE(bsl.forward(Var(x), act, Var(res)), plus(want, doubles(res)), 2e-5);
      }
    }
  }
}

TEST_CASE("CausalConvMixer matches SPEC 1.4's convolution, silu and block-sparse out",
          "[layers][reference]") {
  struct Case {
    int64_t B, T, D, K, block;
  };
  // K = 3 (a pass per tap) and 4 (the taps in one pass); T < K; out blocks of 8
  // (plain loops) and 16, 32 (SIMD tiles; silu applied as the rows are packed).
  for (const Case c : {Case{2, 5, 16, 3, 8}, Case{3, 7, 32, 4, 8}, Case{2, 2, 16, 4, 16},
                       Case{2, 11, 32, 3, 16}, Case{2, 20, 64, 4, 32}}) {
    DYNAMIC_SECTION("B " << c.B << " T " << c.T << " D " << c.D << " K " << c.K << " block " << c.block) {
      MixerOptions o;
      o.dim = c.D;
      o.kernel = c.K;
      o.out = {c.D, c.D, c.block, 0.5, true, "model.mixer.sparsity"};
      CausalConvMixer mixer(o, 1.0);
      mixer.init(11);
      randomise(mixer, "conv", 12);  // U(-1, 1): every tap weighs clearly, conv[d, 0] != conv[d, K-1]
      randomise(mixer, "bias", 13);
      const Tensor u = test::random_tensor({c.B, c.T, c.D}, 14, DType::f32, -2, 2);
      const Tensor res = test::random_tensor({c.B, c.T, c.D}, 15, DType::f32);
      auto p = tensors_of(mixer);
      const Vec want = mixer_ref(doubles(u), p, c.B, c.T, c.D, c.K, c.block);
      NoGradGuard no_grad;
      // Conv: K <= 4 terms, |c| <~ 4 (error <~ 1e-6); silu is 1.1-Lipschitz; then the
      // out product as in BlockSparseLinear (<= 32 terms): ~1e-5 at worst.
      CHECK_CLOSE(mixer.forward(Var(u)), want, 2e-5);
      CHECK_CLOSE(mixer.forward(Var(u), Var(res)), plus(want, doubles(res)), 2e-5);
    }
  }
}

TEST_CASE("MemoryBank matches SPEC 1.5's product-key lookup", "[layers][reference]") {
  struct Case {
    int64_t dim, size, topk, key_dim;
    bool equal_keys;
  };
  // n = 6, k = 3; n = 8, k = n; k = 1 (one slot, weight 1); and all rows of keys1
  // equal, and of keys2, so that every top-k is a tie: topk(s1) and topk(s2) must
  // be 0..k-1 and the k of the k*k tied candidates the lowest slot ids 0..k-1,
  // weights 1/k each.
  for (const Case c : {Case{16, 36, 3, 8, false}, Case{24, 64, 8, 6, false}, Case{16, 100, 1, 4, false},
                       Case{16, 36, 3, 8, true}}) {
    DYNAMIC_SECTION("dim " << c.dim << " size " << c.size << " topk " << c.topk << " key_dim " << c.key_dim
                           << (c.equal_keys ? " equal keys" : "")) {
      MemoryOptions o;
      o.dim = c.dim;
      o.size = c.size;
      o.topk = c.topk;
      o.key_dim = c.key_dim;
      MemoryBank memory(o);
      memory.init(16);
      randomise(memory, "query.bias", 17);
      randomise(memory, "values", 18);  // U(-1, 1): slots clearly apart
      if (c.equal_keys) {
        for (NamedVar& pv : memory.named_parameters())
          if (pv.name == "keys1" || pv.name == "keys2") {
            const Tensor k1 = pv.var.value();
            const int64_t dh = c.key_dim / 2;
            for (int64_t i = 1; i < k1.size(0); ++i)
              for (int64_t j = 0; j < dh; ++j) k1.set_item(i * dh + j, k1.item(j));
          }
      }
      const Tensor u = test::random_tensor({3, 11, c.dim}, 19, DType::f32, -2, 2);
      const Tensor res = test::random_tensor({3, 11, c.dim}, 20, DType::f32);
      auto p = tensors_of(memory);
      double margin = 0;
      const Vec want = memory_ref(doubles(u), p, o, &margin);
      // Scores are sums of <= 24 + 4 terms (query, then keys) of magnitude ~1: f32 errs
      // by ~1e-6, so a gap > 1e-4 at every top-k boundary means round-off cannot
      // change a selection (the seeds are chosen so; ties are by construction).
      if (!c.equal_keys) CHECK(margin > 1e-4);
      NoGradGuard no_grad;
      // The output is a convex combination of U(-1, 1) values; a weight errs by ~1e-6
      // relative (exp of a score that errs by ~1e-6).
      CHECK_CLOSE(memory.forward(Var(u)), want, 1e-5);
      CHECK_CLOSE(memory.forward(Var(u), Var(res)), plus(want, doubles(res)), 1e-5);
    }
  }
}

TEST_CASE("SparseHashEmbedding and its tied head match SPEC 1.2 and 1.7", "[layers][reference]") {
  struct Case {
    int64_t vocab, dim, buckets, hashes;
  };
  for (const Case c : {Case{97, 16, 23, 3}, Case{50, 8, 7, 1}, Case{300, 32, 40, 2}}) {
    DYNAMIC_SECTION("V " << c.vocab << " D " << c.dim << " buckets " << c.buckets << " hashes " << c.hashes) {
      EmbedOptions o;
      o.vocab_size = c.vocab;
      o.dim = c.dim;
      o.buckets = c.buckets;
      o.hashes = c.hashes;
      SparseHashEmbedding embed(o);
      embed.init(21);
      randomise(embed, "table", 22);       // U(-1, 1), not N(0, 0.02^2): logits of O(1)
      randomise(embed, "importance", 23);  // not all 1: a dropped weight shows
      auto p = tensors_of(embed);
      const Vec& table = p["table"];
      const Vec& imp = p["importance"];
      const Vec& bi = p["bucket_index"];
      // The buffer holds SPEC's mix64 rule at init.
      for (int64_t t = 0; t < c.vocab; ++t)
        for (int64_t j = 0; j < c.hashes; ++j) {
          const uint64_t h =
              mix64(static_cast<uint64_t>(t) + static_cast<uint64_t>(j + 1) * 0x9E3779B97F4A7C15ull);
          CHECK(bi[t * c.hashes + j] == static_cast<double>(h % static_cast<uint64_t>(c.buckets)));
        }
      const int64_t B = 3, T = 7, D = c.dim, V = c.vocab, H = c.hashes;
      const Tensor tokens = test::random_indices({B, T}, static_cast<int32_t>(V), 24);
      const Tensor targets = test::random_indices({B, T}, static_cast<int32_t>(V), 25);
      const Tensor z = test::random_tensor({B, T, D}, 26, DType::f32);
      const Vec zd = doubles(z);

      Vec e(static_cast<size_t>(B * T * D), 0.0), logits(static_cast<size_t>(B * T * V), 0.0);
      double ce = 0;
      for (int64_t r = 0; r < B * T; ++r) {
        const int64_t tok = static_cast<int64_t>(tokens.item(r));
        for (int64_t j = 0; j < H; ++j)
          for (int64_t d = 0; d < D; ++d)
            e[r * D + d] += imp[tok * H + j] * table[static_cast<int64_t>(bi[tok * H + j]) * D + d];
        for (int64_t t = 0; t < V; ++t)
          for (int64_t j = 0; j < H; ++j) {
            const int64_t bucket = static_cast<int64_t>(bi[t * H + j]);
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += table[bucket * D + d] * zd[r * D + d];
            logits[r * V + t] += imp[t * H + j] * s;
          }
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < V; ++t) mx = std::max(mx, logits[r * V + t]);
        for (int64_t t = 0; t < V; ++t) sum += std::exp(logits[r * V + t] - mx);
        ce += (mx + std::log(sum) - logits[r * V + static_cast<int64_t>(targets.item(r))]) / (B * T);
      }
      NoGradGuard no_grad;
      // Embedding: <= 3 terms of magnitude <= 1 (~1e-7). Logits: <= 3 bucket scores of
      // <= 32 terms, |logit| <~ 10: <= 3*32 u 10 ~ 6e-5 at worst, ~2e-6 in practice.
      CHECK_CLOSE(embed.forward(tokens), e, 1e-6);
      CHECK_CLOSE(embed.logits(Var(z)), logits, 2e-5);
      // The mean of logsumexp - logit, each as accurate as the logits: relative 1e-5.
      CHECK(embed.cross_entropy(Var(z), targets).value().item() == Approx(ce).epsilon(1e-5));
    }
  }
}

TEST_CASE("adapted Linear and BlockSparseLinear add scale * B (A x) to the base",
          "[layers][reference][lora]") {
  // scale = alpha / rank, or alpha / sqrt(rank) with rslora (layers/lora.h).
  for (auto [rank, alpha, rslora] : {std::tuple{2, 3.0, false}, std::tuple{4, 1.5, true}}) {
    const double scale = rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank;
    DYNAMIC_SECTION("Linear rank " << rank << " alpha " << alpha << " rslora " << rslora) {
      Linear lin(19, 11, true);
      lin.add_lora(rank, alpha, rslora);
      lin.init(27);
      randomise(lin, "bias", 28);
      randomise(lin, "lora_b", 29);  // B = 0 at init would hide the adapter
      auto p = tensors_of(lin);
      const Tensor x = test::random_tensor({3, 4, 19}, 30, DType::f32);
      const Vec xd = doubles(x);
      NoGradGuard no_grad;
      // Base as for Linear; the adapter's A x has 19 terms and B (A x) rank terms, |scale| <= 1.5.
      CHECK_CLOSE(lin.forward(Var(x)),
                  plus(linear_ref(xd, p["weight"], p["bias"], 19, 11),
                       lora_ref(xd, p["lora_a"], p["lora_b"], 19, 11, scale)),
                  1e-5);
    }
    for (int64_t b : {8, 16}) {  // plain loops and SIMD tiles; 2 of 4 column blocks active
      DYNAMIC_SECTION("BlockSparseLinear block " << b << " rank " << rank << " alpha " << alpha << " rslora "
                                                 << rslora) {
        const int64_t in = 4 * b, out = 3 * b;
        BlockSparseLinear bsl({in, out, b, 0.5, true, "model.sparse.sparsity"});
        bsl.add_lora(rank, alpha, rslora);
        bsl.init(31);
        randomise(bsl, "bias", 32);
        randomise(bsl, "lora_b", 33);
        auto p = tensors_of(bsl);
        const Vec w = block_sparse_dense(p["values"], p["col_index"], in, out, b);
        const Tensor x = test::random_tensor({2, 9, in}, 34, DType::f32);
        const Tensor res = test::random_tensor({2, 9, out}, 35, DType::f32);
        NoGradGuard no_grad;
        // The adapter reads act(x) as the base does (forward(x, act) with an adapter).
        // Base <= 32 terms as in BlockSparseLinear, the adapter as for Linear.
        for (InputActivation act : {InputActivation::none, InputActivation::silu, InputActivation::gelu}) {
          INFO("activation " << static_cast<int>(act));
          const Vec ax = activate(doubles(x), act);
          const Vec want = plus(linear_ref(ax, w, p["bias"], in, out),
                                lora_ref(ax, p["lora_a"], p["lora_b"], in, out, scale));
          CHECK_CLOSE(bsl.forward(Var(x), act), want, 2e-5);
          CHECK_CLOSE(bsl.forward(Var(x), act, Var(res)), plus(want, doubles(res)), 2e-5);
        }
      }
    }
  }
}
