#include "infer/infer_model.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "core/buffer.h"
#include "core/check.h"
#include "core/kernels/activation.h"
#include "core/kernels/causal_conv.h"
#include "core/kernels/hash_head.h"
#include "core/kernels/moe_routing.h"
#include "core/kernels/product_key.h"
#include "core/kernels/rms_norm.h"
#include "core/parallel.h"
#include "core/prefetch.h"
#include "core/profiler.h"
#include "infer/lora_adapter.h"
#include "infer/lora_term.h"
#include "infer/model_parts.h"
#include "infer/model_products.h"
#include "infer/quant_rows.h"
#include "infer/quant_tiles.h"

namespace shamn {

using namespace forward_detail;

namespace {

constexpr float kNormEps = 1e-5f;

// Tokens per pass of a long single-stream forward (prefill, evaluation): at
// least kForwardChunk, and kThreadChunk per thread. A pass's activations
// should stay in L2, and its experts (each sees about 2/16 of the pass) should
// run on enough tokens to pay for streaming their weights from L3. 128 or 256
// has gone both ways (experiments/inference.md): 256 took 0.93x the CPU time
// of 128 at stop 27 (a 1 MiB-L2 VM, under load), the two were inside the noise
// on an Emerald Rapids VM (2 MiB), and on a Zen 5 VM (1 MiB) 128 ran a prefill
// alone 1.05x faster at stop 36. Since the few-blocks kernel prefetches three
// tiles ahead (stop 38), one thread prefills 1.06-1.08x faster with 256 than
// with 128 on that Zen 5 VM (the bench pattern, decode in between), and two
// threads 0.88-0.94x with 256 each: 256 in all, 128 a thread from 2 threads on.
constexpr int64_t kForwardChunk = 256;
constexpr int64_t kThreadChunk = 128;

// A single long stream (prefill, evaluation) on several threads runs as that
// many slices of at least this many rows, each through whole layers, instead
// of splitting every small op across the threads (layers_sliced). A slice is
// never shorter than the mixer's K - 1 rows of history either, which every
// slice but the first takes from the rows before it.
constexpr int64_t kMinSliceRows = 32;
// Several streams run as one group of streams a thread, each through whole
// layers, from this many rows a group (streams_grouped). Below it, splitting
// each pass's weights across the threads is faster: 2 threads, `bench
// --streams B`, experiments/inference.md stop 49.
constexpr int64_t kMinGroupRows = 4;

// Rows per forward pass of a long stream (on this thread alone inside a SerialScope).
int64_t forward_chunk() {
  if (in_serial_scope()) return kForwardChunk;
  return std::max<int64_t>(kForwardChunk, kThreadChunk * std::max(1, num_threads()));
}

// Routed rows (tokens x k) from which a MoE block runs its experts as parallel
// tasks: below it (a decode step) the experts' products are split instead.
constexpr int64_t kParallelExpertRows = 32;
// Rows of the mixer convolved, activated and quantised together (32 KiB of c at D = 512).
constexpr int64_t kMixerChunkRows = 16;
// Up to this many rows (a decode step's streams) the passes too light to pay
// for a second thread (norms, the routers, the mixer's out product, the
// combine) run on the calling thread: split, they left the next pass half its
// rows in the other core's cache (experiments/inference.md, stop 48).
constexpr int64_t kFewRows = 64;

// Looks tensors up by name and checks them against the config; counts what it
// used so a file with extra tensors is rejected too.
class TensorBinder {
 public:
  explicit TensorBinder(const ShqFile& file) : file_(file) {}

  const ShqTensor& get(const std::string& name, const Shape& shape, std::initializer_list<ShqDType> allowed) {
    SHAMN_INPUT_CHECK(file_.has_tensor(name), "model file '", file_.path(), "' has no tensor '", name,
                      "' (the config calls for it)");
    const ShqTensor& t = file_.tensor(name);
    bool ok = false;
    for (ShqDType d : allowed) ok = ok || t.dtype == d;
    SHAMN_INPUT_CHECK(ok, "model file '", file_.path(), "': tensor '", name, "' has dtype ",
                      shq_dtype_name(t.dtype), ", which the runtime cannot use there");
    SHAMN_INPUT_CHECK(t.shape == shape, "model file '", file_.path(), "': tensor '", name, "' has shape ",
                      shape_str(t.shape), " but the config implies ", shape_str(shape));
    used_.insert(name);
    return t;
  }
  const float* f32(const std::string& name, const Shape& shape) {
    return static_cast<const float*>(get(name, shape, {ShqDType::f32}).data);
  }
  const int32_t* index(const std::string& name, const Shape& shape, int64_t limit) {
    const ShqTensor& t = get(name, shape, {ShqDType::i32});
    const auto* v = static_cast<const int32_t*>(t.data);
    const int64_t n = shape_numel(shape);
    for (int64_t i = 0; i < n; ++i)
      SHAMN_INPUT_CHECK(v[i] >= 0 && v[i] < limit, "model file '", file_.path(), "': tensor '", name,
                        "' element ", i, " is ", v[i], ", outside [0, ", limit, ")");
    return v;
  }
  WeightMatrix matrix(const std::string& name, const Shape& shape) {
    const ShqTensor& t = get(
        name, shape, {ShqDType::f32, ShqDType::q8_0, ShqDType::q4_0, ShqDType::q8_0x16, ShqDType::q4_0x16});
    return weight_matrix_view(t.dtype, shape, t.data);
  }
  BlockSparse block_sparse(const std::string& prefix, const BlockSparseOptions& o) {
    BlockSparse b;
    b.in = o.in;
    b.out = o.out;
    b.block = o.block;
    b.active = o.active_blocks();
    const int64_t nob = o.out / o.block, nib = o.in / o.block;
    // The matrix view: one output row per row, its a segments of b values side by side.
    WeightMatrix seg = matrix(prefix + ".values", {nob, o.block, b.active, o.block});
    // A row block is multiplied on its own (its rows share their input blocks).
    SHAMN_INPUT_CHECK(!seg.tiled || o.block % kTileRows == 0, "model file '", file_.path(), "': tensor '",
                      prefix, ".values' is tiled by ", kTileRows,
                      " rows, which needs a block that is a multiple of ", kTileRows, ", not ", o.block);
    b.values = seg;
    b.values.rows = o.out;
    b.values.cols = b.active * o.block;
    b.values.segment = o.block;
    b.col_index = index(prefix + ".col_index", {nob, b.active}, nib);
    b.bias = o.bias ? f32(prefix + ".bias", {o.out}) : nullptr;
    return b;
  }
  void check_all_used() const {
    for (const ShqTensor& t : file_.tensors())
      SHAMN_INPUT_CHECK(used_.count(t.name), "model file '", file_.path(), "' has a tensor '", t.name,
                        "' that its config does not call for");
  }

 private:
  const ShqFile& file_;
  std::set<std::string> used_;
};

uint64_t block_sparse_bytes(const BlockSparse& b) {
  return b.values.bytes() + static_cast<uint64_t>(b.out / b.block * b.active) * 4 + (b.bias ? b.out * 4 : 0);
}

}  // namespace

struct InferModel::Impl {
  int64_t D = 0, V = 0, K = 0, buckets = 0, hashes = 0;
  bool tied = true;
  WeightMatrix table;  // [buckets, D]
  const float* importance = nullptr;
  const int32_t* bucket_index = nullptr;
  std::vector<Layer> layers;
  const float* final_gain = nullptr;
  WeightMatrix head;  // untied only: [V, D]
  MoeShape moe;
  ProductKeyDims pk;
  uint64_t bytes_per_token = 0;
  uint64_t source_id = 0;  // the file's: adapters name it as their base

  void embed(const int32_t* tokens, int64_t n, float* x) const;
  // Layer l's mixer over the rows of every stream, each after its own history.
  void mixer(const Layer& L, size_t l, float* x, int64_t n, std::span<const StreamStep> steps,
             const Adapters& ad) const;
  void memory(const Layer& L, size_t l, float* x, int64_t n, const Adapters& ad, RoutingObserver* obs) const;
  void moe_block(const Layer& L, size_t l, float* x, int64_t n, const Adapters& ad,
                 RoutingObserver* obs) const;
  void logits(const float* z, int64_t n, float* out) const;
  // Each row's cross-entropy against its target, from final-normed rows z [n, D].
  void row_losses(const float* z, int64_t n, const int32_t* targets, double* loss) const;
  // Embedding and every layer for the steps' rows (advancing their states): [rows, D].
  Buffer<float> hidden(std::span<const StreamStep> steps) const;
  void layer(size_t l, float* x, int64_t n, std::span<const StreamStep> steps, const Adapters& ad) const;
  // Every layer for one stream's rows cut into `slices` consecutive slices that
  // run in parallel, one task each per layer: the mixer's convolution is the
  // only thing a row takes from the rows before it, and a slice recomputes the
  // K-1 normalised rows it needs. Bitwise what the whole rows give.
  void layers_sliced(const StreamStep& s, float* x, int64_t slices, const Adapters& ad) const;
  bool streams_grouped(std::span<const StreamStep> steps, float* x, int64_t n, const Adapters& ad) const;
};

namespace {

// RMSNorm (SPEC 1.1): training's kernel (its 16 fixed lanes, so an f32 model
// normalises a row to the same bits in both).
void rms_norm(const float* x, const float* gain, int64_t n, int64_t D, float* y) {
  rms_norm_forward<float>(y, nullptr, x, gain, n, D, kNormEps);
}

}  // namespace

void InferModel::Impl::embed(const int32_t* tokens, int64_t n, float* x) const {
  for (int64_t t = 0; t < n; ++t)
    SHAMN_INPUT_CHECK(tokens[t] >= 0 && tokens[t] < V, "token id ", tokens[t], " at position ", t,
                      " is outside the model's vocabulary [0, ", V, ")");
  parallel_for(0, n, grain_for(D * hashes), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      float* xt = x + t * D;
      std::fill_n(xt, D, 0.0f);
      const int64_t tok = tokens[t];
      for (int64_t j = 0; j < hashes; ++j)
        table.add_row(bucket_index[tok * hashes + j], importance[tok * hashes + j], xt);
    }
  });
}

void InferModel::Impl::mixer(const Layer& L, size_t l, float* x, int64_t n, std::span<const StreamStep> steps,
                             const Adapters& ad) const {
  Buffer<float> u(n * D), c(n * D);
  ProfilePhases phase("mixer.norm", ProfileCategory::infer);
  {
    const SerialScope few(n <= kFewRows);
    rms_norm(x, L.mix_gain, n, D, u.data());
  }
  for (int64_t r0 = 0; const StreamStep& s : steps) {
    if (s.record != nullptr) {
      std::vector<float>& rows = s.record->layers[l];
      rows.insert(rows.end(), u.data() + r0 * D, u.data() + (r0 + s.n) * D);
    }
    r0 += s.n;
  }
  // The convolution, SiLU and quantisation run a chunk of rows at a time (the
  // chunk's c still in L1 for the next two) in one parallel loop. Against three
  // whole-window passes this measured no faster on a 2 MiB-L2 machine, where
  // the window fit L2 anyway (experiments/inference.md, fifth pass). Each
  // stream's rows continue its own history: the one place streams differ.
  const BlockSparse& out = L.mixer_out;
  QuantRows cq = out.values.quantized() ? alloc_quant_rows(n, D, out.block) : QuantRows();
  struct Chunk {
    int64_t row0, t0, t1, n;  // the stream's first row in u and c, its rows [t0, t1) of n
    float* history;
    bool whole() const { return t0 == 0 && t1 == n; }
  };
  std::vector<Chunk> chunks;
  for (int64_t r0 = 0; const StreamStep& s : steps) {
    for (int64_t t = 0; t < s.n; t += kMixerChunkRows)
      chunks.push_back({r0, t, std::min(s.n, t + kMixerChunkRows), s.n, s.state->history[l].data()});
    r0 += s.n;
  }
  phase.next("mixer.conv");
  const CausalConvTaps taps(L.conv, D, K);
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const Chunk& ch = chunks[i];
      // A decode step's streams each read their own history, last touched a
      // step ago: the next one's is fetched while this one computes.
      if (i + 1 < hi) prefetch_span(chunks[i + 1].history, (K - 1) * D);
      float* cs = c.data() + ch.row0 * D;
      causal_conv_rows_streaming(cs, u.data() + ch.row0 * D, ch.history, taps, ch.t0, ch.t1);
      // A stream in one chunk moves its history on here, while it is in cache.
      if (ch.whole()) causal_conv_advance_history(ch.history, u.data() + ch.row0 * D, ch.n, D, K);
      silu_forward(cs + ch.t0 * D, cs + ch.t0 * D, (ch.t1 - ch.t0) * D);
      if (out.values.quantized())
        quantize_rows_range(cq, c.data(), ch.row0 + ch.t0, ch.row0 + ch.t1, D, out.block);
    }
  });
  // Streams of several chunks, once all their chunks have read the history.
  for (const Chunk& ch : chunks)
    if (ch.t0 == 0 && !ch.whole())
      causal_conv_advance_history(ch.history, u.data() + ch.row0 * D, ch.n, D, K);
  const LoraTerm lora(
      ad, l, [](const LoraLayer& a) { return a.mixer_out; }, LoraInput{c.data(), D, whole_blocks(out, cq)},
      nullptr, n);
  phase.next("mixer.out");
  const SerialScope few(n <= kFewRows);
  block_sparse_product(out, c.data(), &cq, nullptr, n, x, &lora, /*accumulate=*/true);
}

void InferModel::Impl::memory(const Layer& L, size_t l, float* x, int64_t n, const Adapters& ad,
                              RoutingObserver* obs) const {
  const int64_t dh = pk.dh, nk = pk.n, k = pk.k;
  Buffer<float> u(n * D), q(n * 2 * dh);
  ProfilePhases phase("memory.query", ProfileCategory::infer);
  rms_norm(x, L.mem_gain, n, D, u.data());
  const QuantRows uq = L.query.w.quantized() ? quantize_rows(u.data(), n, D, 0) : QuantRows();
  const LoraTerm lora(
      ad, l, [](const LoraLayer& a) { return a.query; },
      LoraInput{u.data(), D, L.query.w.quantized() ? &uq : nullptr}, nullptr, n);
  dense_product(L.query, u.data(), &uq, n, q.data(), &lora);
  // Split q into its halves, then score them against the two key sets.
  Buffer<float> q1(n * dh), q2(n * dh);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(q.data() + t * 2 * dh, dh, q1.data() + t * dh);
    std::copy_n(q.data() + t * 2 * dh + dh, dh, q2.data() + t * dh);
  }
  Buffer<float> s1(n * nk), s2(n * nk);
  phase.next("memory.keys");
  dense_forward(Dense{L.keys1, nullptr}, q1.data(), n, s1.data());
  dense_forward(Dense{L.keys2, nullptr}, q2.data(), n, s2.data());
  Buffer<int32_t> slots(n * k);
  Buffer<float> w(n * k);
  phase.next("memory.select");
  product_key_select(slots.data(), w.data(), s1.data(), s2.data(), n, pk);
  if (obs != nullptr) obs->memory_reads(static_cast<int64_t>(l), slots.data(), w.data(), n);
  phase.next("memory.values");
  // The next token's rows load into L1 while this token's are added, and the
  // rows of the token kL2Ahead further on into L2: the bank (36 MiB at int8)
  // is read from DRAM, and L1's few outstanding misses alone kept a prefill's
  // reads at about 9 GB/s. Further ahead into L1 measured no faster.
  constexpr int64_t kL2Ahead = 3;
  const auto prefetch = [&](int64_t t, bool to_l2) {
    for (int64_t m = 0; m < k; ++m) L.mem_values.prefetch_row(slots[t * k + m], to_l2);
  };
  parallel_for(0, n, grain_for(k * D), [&](int64_t lo, int64_t hi) {
    prefetch(lo, false);
    for (int64_t t = lo + 1; t < std::min(hi, lo + kL2Ahead); ++t) prefetch(t, true);
    for (int64_t t = lo; t < hi; ++t) {
      if (t + 1 < hi) prefetch(t + 1, false);
      if (t + kL2Ahead < hi) prefetch(t + kL2Ahead, true);
      for (int64_t m = 0; m < k; ++m) L.mem_values.add_row(slots[t * k + m], w[t * k + m], x + t * D);
    }
  });
}

void InferModel::Impl::moe_block(const Layer& L, size_t l, float* x, int64_t n, const Adapters& ad,
                                 RoutingObserver* obs) const {
  const int64_t G = moe.groups, X = moe.experts(), k = moe.k;
  Buffer<float> u(n * D);
  ProfilePhases phase("moe.route", ProfileCategory::infer);
  // Both routers read u whole-row quantised: quantised once (and reused by the experts below).
  const bool routers_q = L.router_group.quantized() || L.router_expert.quantized();
  QuantRows uq;
  Buffer<int32_t> chosen(n * k);
  Buffer<float> gates(n * k);
  {
    const SerialScope few(n <= kFewRows);
    rms_norm(x, L.moe_gain, n, D, u.data());
    if (routers_q) uq = quantize_rows(u.data(), n, D, 0);
    Buffer<float> rg(n * G), re(n * X);
    const LoraInput router_in{u.data(), D, routers_q ? &uq : nullptr};
    const LoraTerm lora_group(
        ad, l, [](const LoraLayer& a) { return a.router_group; }, router_in, nullptr, n);
    const LoraTerm lora_expert(
        ad, l, [](const LoraLayer& a) { return a.router_expert; }, router_in, nullptr, n);
    dense_product(Dense{L.router_group, nullptr}, u.data(), &uq, n, rg.data(), &lora_group);
    dense_product(Dense{L.router_expert, nullptr}, u.data(), &uq, n, re.data(), &lora_expert);
    Buffer<float> P(n * X), pg(n * G), pe(n * X);
    router_probs_forward<float>(P.data(), pg.data(), pe.data(), rg.data(), re.data(), n, moe);
    select_experts<float>(chosen.data(), pg.data(), P.data(), n, moe);
    moe_gates_forward<float>(gates.data(), P.data(), chosen.data(), n, X, k);
    if (obs != nullptr) obs->moe_choices(static_cast<int64_t>(l), chosen.data(), gates.data(), n);
  }
  phase.next("moe.dispatch");
  // Each expert runs once over the rows of the tokens that chose it, in plan
  // order; a token's outputs are added to x in slot order (thread-count independent).
  Buffer<int32_t> order(n * k), row(n * k);
  Buffer<int64_t> offsets(X + 1);
  moe_dispatch_plan(order.data(), row.data(), offsets.data(), chosen.data(), n, k, X);
  const int64_t H = L.experts.front().up.out;
  // An expert's hidden rows live only through its own up, GELU and down: one
  // buffer per task, reused expert after expert, so the chunk's [n k, H] is not
  // streamed through the cache between the experts' outputs and the combine.
  Buffer<float> ys(n * k * D);
  // Quantised experts read their tokens' rows of u in place, quantised once
  // per token; f32 ones get them gathered.
  const BlockSparse& up0 = L.experts.front().up;
  // Segments of whole quantisation blocks quantise to the routers' bytes.
  const bool reuse = routers_q && up0.block % kQuantBlock == 0;
  const QuantRows uq_up =
      up0.values.quantized() && !reuse ? quantize_rows(u.data(), n, D, up0.block) : QuantRows();
  const QuantRows* uq_experts = reuse ? &uq : &uq_up;
  Buffer<float> xs(up0.values.quantized() ? 0 : n * k * D);
  for (int64_t r = 0; r < xs.size() / D; ++r) std::copy_n(u.data() + order[r] * D, D, xs.data() + r * D);
  // Batched work runs the experts side by side (each over its own rows of h
  // and ys); a decode step's two routed experts are too small to share out.
  const bool experts_parallel = n * k >= kParallelExpertRows;
  parallel_for(0, X, experts_parallel ? 1 : X, [&](int64_t lo, int64_t hi) {
    const SerialScope serial(experts_parallel);  // an expert's products run on its task's thread
    Buffer<float> h;
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
      if (m == 0) continue;
      const BlockSparse& up = L.experts[e].up;
      SHAMN_CHECK(up.values.quantized() == up0.values.quantized() && up.block == up0.block,
                  "every expert's up projection has the same type and block");
      h.reserve_at_least(m * H);
      float* he = h.data();
      ProfilePhases expert_phase("moe.up", ProfileCategory::infer);
      const int32_t* tokens = order.data() + r0;
      const LoraTerm lora_up(
          ad, l, [e](const LoraLayer& a) { return a.up[e]; },
          LoraInput{u.data(), D, whole_blocks(up, *uq_experts), tokens}, tokens, m);
      block_sparse_product(up, xs.size() ? xs.data() + r0 * D : nullptr, uq_experts, tokens, m, he, &lora_up);
      expert_phase.next("moe.gelu");
      gelu_forward(he, he, m * H);
      expert_phase.next("moe.quantise");
      const BlockSparse& down = L.experts[e].down;
      const QuantRows hq = down.values.quantized() ? quantize_rows(he, m, H, down.block) : QuantRows();
      const LoraTerm lora_down(
          ad, l, [e](const LoraLayer& a) { return a.down[e]; }, LoraInput{he, H, whole_blocks(down, hq)},
          tokens, m);
      expert_phase.next("moe.down");
      block_sparse_product(down, he, &hq, nullptr, m, ys.data() + r0 * D, &lora_down);
    }
  });
  phase.next("moe.combine");
  const SerialScope few(n <= kFewRows);
  moe_combine_forward(x, gates.data(), ys.data(), row.data(), n, k, D, /*accumulate=*/true);
}

void InferModel::Impl::row_losses(const float* z, int64_t n, const int32_t* targets, double* loss) const {
  if (tied) {
    // The fused loss of training: 16 rows at a time, no [n, V] logits stored.
    Buffer<float> s(n * buckets);
    dense_forward(Dense{table, nullptr}, z, n, s.data());
    hash_head_row_losses(loss, s.data(), importance, bucket_index, targets, n,
                         HashDims{V, hashes, buckets, D});
    return;
  }
  Buffer<float> out(n * V);
  dense_forward(Dense{head, nullptr}, z, n, out.data());
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) loss[t] = logsumexp(out.data() + t * V, V) - out[t * V + targets[t]];
  });
}

void InferModel::Impl::logits(const float* z, int64_t n, float* out) const {
  if (!tied) {
    dense_forward(Dense{head, nullptr}, z, n, out);
    return;
  }
  Buffer<float> s(n * buckets);
  dense_forward(Dense{table, nullptr}, z, n, s.data());
  hash_head_gather(out, s.data(), importance, bucket_index, n, HashDims{V, hashes, buckets, D});
}

InferModel::InferModel(ShqFile file) : file_(std::move(file)), impl_(std::make_unique<Impl>()) {
  SHAMN_INPUT_CHECK(
      !is_lora_config(file_.config_toml(), file_.path() + " (embedded config)"), "'", file_.path(),
      "' is a LoRA adapter, not a model: load it beside its base (generate, eval, bench and serve take "
      "--adapter)");
  config_ = ModelConfig::from_toml(file_.config_toml(), file_.path() + " (embedded config)");
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  m.source_id = file_.header().source_id();
  const EmbedOptions eo = c.embed();
  m.D = c.dim;
  m.V = c.vocab_size;
  m.K = c.mixer_kernel;
  m.buckets = eo.buckets;
  m.hashes = eo.hashes;
  m.tied = eo.tie_head;
  const MoeOptions mo = c.moe();
  m.moe = MoeShape{mo.groups, mo.experts_per_group, mo.group_k, mo.k};
  const MemoryOptions me = c.memory();
  m.pk = ProductKeyDims{me.sqrt_size(), me.key_dim / 2, me.topk, c.dim};

  TensorBinder bind(file_);
  m.table = bind.matrix("embed.table", {m.buckets, m.D});
  m.importance = bind.f32("embed.importance", {m.V, m.hashes});
  m.bucket_index = bind.index("embed.bucket_index", {m.V, m.hashes}, m.buckets);
  const MixerOptions mx = c.mixer();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.mixer_scope = profile_intern(p + "mixer");
    L.memory_scope = profile_intern(p + "memory");
    L.moe_scope = profile_intern(p + "moe");
    L.mix_gain = bind.f32(p + "mix_norm.gain", {m.D});
    L.conv = bind.f32(p + "mixer.conv", {m.D, m.K});
    L.mixer_out = bind.block_sparse(p + "mixer.out", mx.out);
    L.has_memory = c.has_memory(l);
    if (L.has_memory) {
      L.mem_gain = bind.f32(p + "mem_norm.gain", {m.D});
      L.query.w = bind.matrix(p + "memory.query.weight", {2 * m.pk.dh, m.D});
      L.query.bias = bind.f32(p + "memory.query.bias", {2 * m.pk.dh});
      L.keys1 = bind.matrix(p + "memory.keys1", {m.pk.n, m.pk.dh});
      L.keys2 = bind.matrix(p + "memory.keys2", {m.pk.n, m.pk.dh});
      L.mem_values = bind.matrix(p + "memory.values", {m.pk.slots(), m.D});
    }
    L.moe_gain = bind.f32(p + "moe_norm.gain", {m.D});
    L.router_group = bind.matrix(p + "moe.router_group.weight", {mo.groups, m.D});
    L.router_expert = bind.matrix(p + "moe.router_expert.weight", {mo.experts(), m.D});
    for (int64_t e = 0; e < mo.experts(); ++e) {
      const std::string q = p + "moe.experts." + std::to_string(e) + ".";
      L.experts.push_back({bind.block_sparse(q + "up", mo.up), bind.block_sparse(q + "down", mo.down)});
      // The experts' products share one quantised input (moe): one type for all of them.
      const Expert& first = L.experts.front();
      const Expert& last = L.experts.back();
      for (const auto& [a, b, part] :
           {std::tuple{&first.up, &last.up, "up"}, {&first.down, &last.down, "down"}})
        SHAMN_INPUT_CHECK(a->values.type == b->values.type && a->values.tiled == b->values.tiled,
                          "model file '", file_.path(), "': tensor '", q, part,
                          ".values' is stored as another type than '", p, "moe.experts.0.", part,
                          ".values'; every expert's must be the same");
    }
    m.layers.push_back(std::move(L));
  }
  m.final_gain = bind.f32("final_norm.gain", {m.D});
  if (!m.tied) m.head = bind.matrix("head.weight", {m.V, m.D});
  bind.check_all_used();

  if (file_.header().tokenizer_bytes > 0) {
    tokenizer_ = Tokenizer::parse(file_.tokenizer_text(), file_.path() + " (embedded tokenizer)");
    SHAMN_INPUT_CHECK(tokenizer_->vocab_size() <= m.V, "model file '", file_.path(),
                      "': the embedded tokenizer has ", tokenizer_->vocab_size(),
                      " tokens, more than the model's vocab_size ", m.V);
  }

  // What one decoded token reads.
  uint64_t b = static_cast<uint64_t>(m.hashes) * m.table.row_bytes() + m.D * 4;  // embedding rows, final gain
  for (const Layer& L : m.layers) {
    b += static_cast<uint64_t>(m.D) * (m.K + 2) * 4 + block_sparse_bytes(L.mixer_out);
    if (L.has_memory)
      b += m.D * 4 + L.query.w.bytes() + 2 * m.pk.dh * 4 + L.keys1.bytes() + L.keys2.bytes() +
           static_cast<uint64_t>(m.pk.k) * L.mem_values.row_bytes();
    b += L.router_group.bytes() + L.router_expert.bytes() +
         static_cast<uint64_t>(mo.k) *
             (block_sparse_bytes(L.experts[0].up) + block_sparse_bytes(L.experts[0].down));
  }
  // The tied head reads every token's importances and bucket indices, the input
  // token's among them; the untied one reads only the input token's.
  b += m.tied ? m.table.bytes() + static_cast<uint64_t>(m.V) * m.hashes * 8
              : m.head.bytes() + static_cast<uint64_t>(m.hashes) * 8;
  m.bytes_per_token = b;
}

InferModel::InferModel(InferModel&&) noexcept = default;
InferModel::~InferModel() = default;

DecodeState InferModel::new_state() const {
  DecodeState s;
  s.history.assign(impl_->layers.size(),
                   std::vector<float>(static_cast<size_t>((impl_->K - 1) * impl_->D), 0.0f));
  return s;
}

void InferModel::rewind(DecodeState& state, const DecodeState& before, const MixerInputs& inputs,
                        int64_t keep) const {
  const int64_t D = impl_->D, H = impl_->K - 1;  // H history rows per layer
  const size_t L = impl_->layers.size();
  SHAMN_CHECK(before.history.size() == L && inputs.layers.size() == L && keep >= 0,
              "rewind: state or inputs are for another model");
  state.history.resize(L);
  for (size_t l = 0; l < L; ++l) {
    const std::vector<float>& rows = inputs.layers[l];
    SHAMN_CHECK(keep * D <= static_cast<int64_t>(rows.size()), "rewind: ", keep, " tokens kept of ",
                rows.size() / D, " recorded");
    // The last H rows of [before's H rows, the first `keep` recorded rows].
    const int64_t from_before = std::max<int64_t>(H - keep, 0);
    std::vector<float>& h = state.history[l];
    h.resize(static_cast<size_t>(H * D));
    std::copy_n(before.history[l].data() + (H - from_before) * D, from_before * D, h.data());
    std::copy_n(rows.data() + (keep - (H - from_before)) * D, (H - from_before) * D,
                h.data() + from_before * D);
  }
  state.position = before.position + keep;
}

void InferModel::forward(const int32_t* tokens, int64_t n, DecodeState& state, float* logits, bool all_logits,
                         const LoraAdapter* adapter) const {
  SHAMN_CHECK(n >= 1, "forward needs at least one token");
  // Long inputs run in chunks whose activations stay in the L2 cache; the
  // state carries the convolution history across, so chunking is exact.
  const int64_t chunk = forward_chunk();
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t c = std::min(chunk, n - t0);
    StreamStep step{&state, tokens + t0, c, all_logits};
    step.adapter = adapter;
    if (!all_logits && t0 + c < n)
      forward(std::span(&step, 1), nullptr);
    else
      forward(std::span(&step, 1), all_logits ? logits + t0 * impl_->V : logits);
  }
}

Buffer<float> InferModel::Impl::hidden(std::span<const StreamStep> steps) const {
  SHAMN_CHECK(!steps.empty(), "forward needs at least one stream");
  int64_t n = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StreamStep& s = steps[i];
    SHAMN_CHECK(s.n >= 1, "stream ", i, " has no tokens");
    SHAMN_CHECK(s.state != nullptr && s.state->history.size() == layers.size(), "stream ", i,
                "'s decode state is for another model");
    for (size_t j = 0; j < i; ++j) {
      SHAMN_CHECK(steps[j].state != s.state, "streams ", j, " and ", i, " share one decode state");
      // Streams may run on different threads (streams_grouped).
      SHAMN_CHECK(s.record == nullptr || steps[j].record != s.record, "streams ", j, " and ", i,
                  " share one record");
    }
    if (s.record != nullptr) s.record->layers.resize(layers.size());
    SHAMN_CHECK(s.observer == nullptr || steps.size() == 1,
                "a routing observer sees a forward of one stream");
    n += s.n;
  }
  Buffer<int32_t> tokens(n);
  Buffer<float> x(n * D);
  {
    const ProfileScope scope("embed", ProfileCategory::infer);
    int64_t r = 0;
    for (const StreamStep& s : steps) {
      std::copy_n(s.tokens, s.n, tokens.data() + r);
      r += s.n;
    }
    embed(tokens.data(), n, x.data());
  }
  // An observer is told the rows in order, so its forward is not sliced; nor is
  // one already running on a single thread (a SerialScope: concurrent windows).
  const int64_t slices =
      steps.size() == 1 && steps[0].record == nullptr && steps[0].observer == nullptr && !in_serial_scope()
          ? std::min<int64_t>(num_threads(), n / std::max(kMinSliceRows, K - 1))
          : 1;
  // The steps' adapters, and each row's.
  std::vector<const LoraAdapter*> adapters;
  Buffer<int32_t> row_adapter(n);
  int64_t r0 = 0;
  for (const StreamStep& s : steps) {
    int32_t a = -1;
    if (s.adapter != nullptr) {
      SHAMN_CHECK(s.adapter->base_id() == source_id, "adapter '", s.adapter->path(),
                  "' belongs to another base model");
      a = static_cast<int32_t>(std::find(adapters.begin(), adapters.end(), s.adapter) - adapters.begin());
      if (a == static_cast<int32_t>(adapters.size())) adapters.push_back(s.adapter);
    }
    std::fill_n(row_adapter.data() + r0, s.n, a);
    r0 += s.n;
  }
  const Adapters ad{adapters, adapters.empty() ? nullptr : row_adapter.data()};
  if (slices > 1) {
    layers_sliced(steps[0], x.data(), slices, ad);
  } else if (!streams_grouped(steps, x.data(), n, ad)) {
    for (size_t l = 0; l < layers.size(); ++l) layer(l, x.data(), n, steps, ad);
  }
  for (const StreamStep& s : steps) s.state->position += s.n;
  return x;
}

void InferModel::Impl::layer(size_t l, float* x, int64_t n, std::span<const StreamStep> steps,
                             const Adapters& ad) const {
  const Layer& L = layers[l];
  RoutingObserver* observer = steps.size() == 1 ? steps[0].observer : nullptr;  // hidden() checks
  {
    const ProfileScope scope(L.mixer_scope, ProfileCategory::infer);
    mixer(L, l, x, n, steps, ad);
  }
  if (L.has_memory) {
    const ProfileScope scope(L.memory_scope, ProfileCategory::infer);
    memory(L, l, x, n, ad, observer);
  }
  const ProfileScope scope(L.moe_scope, ProfileCategory::infer);
  moe_block(L, l, x, n, ad, observer);
}

// Several streams (a batched decode step, the prompts of a batch) on several
// threads: consecutive streams of about equal rows make one group a thread, and
// each group runs through every layer on its thread. The streams are independent,
// so the threads meet once a step, not at every pass, and each pass's rows stay
// in its thread's cache. Returns false where this does not pay: one stream, too
// few rows (the weights' bandwidth, split across threads by the passes, is then
// the limit), or rows that do not share out evenly.
bool InferModel::Impl::streams_grouped(std::span<const StreamStep> steps, float* x, int64_t n,
                                       const Adapters& ad) const {
  if (in_serial_scope() || steps.size() < 2 || num_threads() < 2) return false;
  const int64_t groups =
      std::min<int64_t>({num_threads(), static_cast<int64_t>(steps.size()), n / kMinGroupRows});
  if (groups < 2) return false;
  // Group g: the streams from first[g], starting at row row[g]; a group starts
  // at the first stream past its share of the rows.
  std::vector<size_t> first{0};
  std::vector<int64_t> row{0};
  int64_t r = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto g = static_cast<int64_t>(first.size());
    if (i > 0 && g < groups && r >= n * g / groups) {
      first.push_back(i);
      row.push_back(r);
    }
    r += steps[i].n;
  }
  if (static_cast<int64_t>(first.size()) < groups) return false;
  first.push_back(steps.size());
  row.push_back(n);
  // A long prompt among decoding streams would leave the other threads idle:
  // no group may have more than about 5/4 of the mean rows (one row a group
  // of slack).
  for (int64_t q = 0; q < groups; ++q)
    if ((row[q + 1] - row[q]) * groups > n * 5 / 4 + groups) return false;
  const ProfileScope scope("streams.grouped", ProfileCategory::infer);
  parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
    const SerialScope serial;  // a group a thread: its passes run inline
    for (int64_t q = lo; q < hi; ++q) {
      const auto group = steps.subspan(first[q], first[q + 1] - first[q]);
      for (size_t l = 0; l < layers.size(); ++l)
        layer(l, x + row[q] * D, row[q + 1] - row[q], group, ad.from_row(row[q]));
    }
  });
  return true;
}

void InferModel::Impl::layers_sliced(const StreamStep& s, float* x, int64_t slices,
                                     const Adapters& ad) const {
  const int64_t n = s.n, H = K - 1;
  std::vector<int64_t> begin(static_cast<size_t>(slices + 1));
  for (int64_t p = 0; p <= slices; ++p) begin[p] = n * p / slices;
  // Each slice continues the history its predecessor's rows give it.
  std::vector<DecodeState> local(static_cast<size_t>(slices));
  for (DecodeState& d : local) d.history.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    // The rows before each slice, normalised as the mixer normalises them,
    // taken before any slice adds this layer's outputs to x.
    for (int64_t p = 0; p < slices; ++p) {
      std::vector<float>& h = local[p].history[l];
      if (p == 0) {
        h = s.state->history[l];
      } else {
        h.resize(static_cast<size_t>(H * D));
        rms_norm(x + (begin[p] - H) * D, layers[l].mix_gain, H, D, h.data());
      }
    }
    parallel_for(0, slices, 1, [&](int64_t lo, int64_t hi) {
      const SerialScope serial;  // one slice per thread: its own loops run inline
      for (int64_t p = lo; p < hi; ++p) {
        StreamStep step = s;
        step.state = &local[p];
        step.tokens = s.tokens + begin[p];
        step.n = begin[p + 1] - begin[p];
        layer(l, x + begin[p] * D, step.n, std::span(&step, 1), ad.from_row(begin[p]));
      }
    });
    s.state->history[l] = local[slices - 1].history[l];
  }
}

void InferModel::forward(std::span<const StreamStep> steps, float* logits) const {
  const Impl& m = *impl_;
  const Buffer<float> x = m.hidden(steps);
  if (logits == nullptr) return;
  const ProfileScope scope("head", ProfileCategory::infer);
  // Only the rows whose logits are wanted go through the final norm and head.
  int64_t wanted = 0;
  for (const StreamStep& s : steps) wanted += s.all_logits ? s.n : 1;
  Buffer<float> z(wanted * m.D);
  int64_t r0 = 0, w = 0;
  for (const StreamStep& s : steps) {
    const int64_t first = s.all_logits ? 0 : s.n - 1;
    rms_norm(x.data() + (r0 + first) * m.D, m.final_gain, s.n - first, m.D, z.data() + w * m.D);
    w += s.n - first;
    r0 += s.n;
  }
  m.logits(z.data(), wanted, logits);
}

void InferModel::forward_losses(const int32_t* tokens, int64_t n, DecodeState& state, const int32_t* targets,
                                double* losses, const LoraAdapter* adapter) const {
  const Impl& m = *impl_;
  SHAMN_CHECK(n >= 1, "forward needs at least one token");
  for (int64_t t = 0; t < n; ++t)
    SHAMN_INPUT_CHECK(targets[t] >= 0 && targets[t] < m.V, "target token id ", targets[t], " at position ", t,
                      " is outside the model's vocabulary [0, ", m.V, ")");
  const int64_t chunk = forward_chunk();
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t c = std::min(chunk, n - t0);
    StreamStep step{&state, tokens + t0, c, true};
    step.adapter = adapter;
    const Buffer<float> x = m.hidden(std::span(&step, 1));
    const ProfileScope scope("head", ProfileCategory::infer);
    Buffer<float> z(c * m.D);
    rms_norm(x.data(), m.final_gain, c, m.D, z.data());
    m.row_losses(z.data(), c, targets + t0, losses + t0);
  }
}

uint64_t InferModel::weight_bytes_per_token() const { return impl_->bytes_per_token; }

uint64_t InferModel::weight_bytes() const {
  uint64_t b = 0;
  for (const ShqTensor& t : file_.tensors()) b += t.bytes;
  return b;
}

}  // namespace shamn
