#include "infer/infer_model.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/check.h"
#include "core/kernels/activation.h"
#include "core/kernels/causal_conv.h"
#include "core/kernels/hash_head.h"
#include "core/kernels/moe_routing.h"
#include "core/kernels/product_key.h"
#include "core/kernels/rms_norm.h"
#include "core/parallel.h"
#include "core/profiler.h"
#include "infer/quant_tiles.h"

namespace shamn {

namespace {

constexpr float kNormEps = 1e-5f;

// Multiply-adds per parallel task: below this a loop runs on the calling
// thread, so a decode step's small matrices do not pay for task dispatch.
constexpr int64_t kTaskMacs = 1 << 15;

int64_t grain_for(int64_t macs_per_item) {
  return std::max<int64_t>(1, kTaskMacs / std::max<int64_t>(macs_per_item, 1));
}

struct Dense {
  WeightMatrix w;               // [out, in]
  const float* bias = nullptr;  // [out] or null
};

// A BlockSparseLinear as the runtime stores it: values [nob, b, a, b] (output
// row r*b+i holds its a active blocks side by side), each b-value segment
// quantised on its own, so one output row is a * quant_blocks(b) blocks.
struct BlockSparse {
  int64_t in = 0, out = 0, block = 0, active = 0;
  WeightMatrix values;                                            // rows = out, cols = active * block
  const int32_t* col_index = nullptr;                             // [nob, a]
  const float* bias = nullptr;                                    // [out]
  int64_t segment_blocks() const { return quant_blocks(block); }  // per b-value segment
};

struct Expert {
  BlockSparse up, down;
};

struct Layer {
  const float* mix_gain = nullptr;
  const float* conv = nullptr;  // [D, K]
  BlockSparse mixer_out;
  bool has_memory = false;
  const float* mem_gain = nullptr;
  Dense query;
  WeightMatrix keys1, keys2, mem_values;  // [n, dh], [n, dh], [n^2, D]
  const float* moe_gain = nullptr;
  WeightMatrix router_group, router_expert;  // [G, D], [G*E, D]
  std::vector<Expert> experts;
  // Profiler scope names: "layers.3.mixer", ...
  const char* mixer_scope = nullptr;
  const char* memory_scope = nullptr;
  const char* moe_scope = nullptr;
};

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
    WeightMatrix w;
    w.type = t.dtype == ShqDType::f32                                    ? WeightType::f32
             : t.dtype == ShqDType::q8_0 || t.dtype == ShqDType::q8_0x16 ? WeightType::q8
                                                                         : WeightType::q4;
    w.tiled = shq_dtype_tiled(t.dtype);
    w.cols = shape.back();
    w.rows = shape_numel(shape) / w.cols;
    w.data = t.data;
    return w;
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

  void embed(const int32_t* tokens, int64_t n, float* x) const;
  void mixer(const Layer& L, float* x, int64_t n, std::vector<float>& history) const;
  void memory(const Layer& L, float* x, int64_t n) const;
  void moe_block(const Layer& L, float* x, int64_t n) const;
  void logits(const float* z, int64_t n, float* out) const;
};

namespace {

// y[t] = W x[t] + bias for t < n. x: [n, in]  y: [n, out]. Activations are
// quantised once per token; tasks take tiles of weight rows and run every
// token over them, so a tile is read from memory once per call.
void dense_forward(const Dense& L, const float* x, int64_t n, float* y) {
  const WeightMatrix& W = L.w;
  const int64_t in = W.cols, out = W.rows, bpr = W.blocks_per_row();
  std::vector<BlockQ8> xq(W.quantized() ? static_cast<size_t>(n * bpr) : 0);
  if (W.quantized())
    parallel_for(0, n, grain_for(in), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) quantize_row_q8(x + t * in, xq.data() + t * bpr, in);
    });
  const int64_t tile = 16;
  const int64_t tiles = (out + tile - 1) / tile;
  parallel_for(0, tiles, grain_for(tile * in * n), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t r0 = c * tile, rn = std::min(tile, out - r0);
      for (int64_t t = 0; t < n; ++t) {
        const InputRow row{x + t * in, W.quantized() ? xq.data() + t * bpr : nullptr};
        float* yt = y + t * out + r0;
        W.dot_rows(r0, rn, row, yt);
        if (L.bias)
          for (int64_t i = 0; i < rn; ++i) yt[i] += L.bias[r0 + i];
      }
    }
  });
}

// y[t] = W x[t] + bias for a block-sparse W. x: [n, in]  y: [n, out].
void block_sparse_forward(const BlockSparse& L, const float* x, int64_t n, float* y) {
  const WeightMatrix& W = L.values;
  const int64_t b = L.block, a = L.active, nib = L.in / b, nob = L.out / b, sb = L.segment_blocks();
  const bool q = W.quantized();
  // Activations quantised per b-value segment, like the weights: [n, nib * sb].
  std::vector<BlockQ8> xq(q ? static_cast<size_t>(n * nib * sb) : 0);
  if (q)
    parallel_for(0, n, grain_for(L.in), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        // Segments that are whole quantisation blocks quantise as one row (the same bytes, one call).
        if (b % kQuantBlock == 0) {
          quantize_row_q8(x + t * L.in, xq.data() + t * nib * sb, L.in);
          continue;
        }
        for (int64_t s = 0; s < nib; ++s)
          quantize_row_q8(x + t * L.in + s * b, xq.data() + (t * nib + s) * sb, b);
      }
    });
  parallel_for(0, nob, grain_for(b * a * b * n), [&](int64_t lo, int64_t hi) {
    std::vector<float> gf(q ? 0 : static_cast<size_t>(a * b));
    std::vector<BlockQ8> gq(q ? static_cast<size_t>(a * sb) : 0);
    for (int64_t r = lo; r < hi; ++r) {
      const int32_t* cols = L.col_index + r * a;
      for (int64_t t = 0; t < n; ++t) {
        // The a input segments row block r reads, gathered side by side.
        for (int64_t m = 0; m < a; ++m) {
          if (q)
            std::copy_n(xq.data() + (t * nib + cols[m]) * sb, sb, gq.data() + m * sb);
          else
            std::copy_n(x + t * L.in + cols[m] * b, b, gf.data() + m * b);
        }
        float* yt = y + t * L.out + r * b;
        W.dot_rows(r * b, b, InputRow{gf.data(), gq.data()}, yt);
        if (L.bias)
          for (int64_t i = 0; i < b; ++i) yt[i] += L.bias[r * b + i];
      }
    }
  });
}

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

void InferModel::Impl::mixer(const Layer& L, float* x, int64_t n, std::vector<float>& history) const {
  std::vector<float> u(static_cast<size_t>(n * D)), c(static_cast<size_t>(n * D));
  rms_norm(x, L.mix_gain, n, D, u.data());
  // The inputs before this call's first token come from the history.
  causal_conv_forward_streaming(c.data(), u.data(), history.data(), L.conv, CausalConvDims{1, n, D, K});
  silu_forward(c.data(), c.data(), n * D);
  block_sparse_forward(L.mixer_out, c.data(), n, u.data());
  for (int64_t i = 0; i < n * D; ++i) x[i] += u[i];
}

void InferModel::Impl::memory(const Layer& L, float* x, int64_t n) const {
  const int64_t dh = pk.dh, nk = pk.n, k = pk.k;
  std::vector<float> u(static_cast<size_t>(n * D)), q(static_cast<size_t>(n * 2 * dh));
  rms_norm(x, L.mem_gain, n, D, u.data());
  dense_forward(L.query, u.data(), n, q.data());
  // Split q into its halves, then score them against the two key sets.
  std::vector<float> q1(static_cast<size_t>(n * dh)), q2(static_cast<size_t>(n * dh));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(q.data() + t * 2 * dh, dh, q1.data() + t * dh);
    std::copy_n(q.data() + t * 2 * dh + dh, dh, q2.data() + t * dh);
  }
  std::vector<float> s1(static_cast<size_t>(n * nk)), s2(static_cast<size_t>(n * nk));
  dense_forward(Dense{L.keys1, nullptr}, q1.data(), n, s1.data());
  dense_forward(Dense{L.keys2, nullptr}, q2.data(), n, s2.data());
  std::vector<int32_t> slots(static_cast<size_t>(n * k));
  std::vector<float> w(static_cast<size_t>(n * k));
  product_key_select(slots.data(), w.data(), s1.data(), s2.data(), n, pk);
  parallel_for(0, n, grain_for(k * D), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      for (int64_t m = 0; m < k; ++m) L.mem_values.add_row(slots[t * k + m], w[t * k + m], x + t * D);
  });
}

void InferModel::Impl::moe_block(const Layer& L, float* x, int64_t n) const {
  const int64_t G = moe.groups, X = moe.experts(), k = moe.k;
  std::vector<float> u(static_cast<size_t>(n * D));
  rms_norm(x, L.moe_gain, n, D, u.data());
  std::vector<float> rg(static_cast<size_t>(n * G)), re(static_cast<size_t>(n * X));
  dense_forward(Dense{L.router_group, nullptr}, u.data(), n, rg.data());
  dense_forward(Dense{L.router_expert, nullptr}, u.data(), n, re.data());
  std::vector<float> P(static_cast<size_t>(n * X)), pg(static_cast<size_t>(n * G)),
      pe(static_cast<size_t>(n * X));
  router_probs_forward<float>(P.data(), pg.data(), pe.data(), rg.data(), re.data(), n, moe);
  std::vector<int32_t> chosen(static_cast<size_t>(n * k));
  select_experts<float>(chosen.data(), pg.data(), P.data(), n, moe);
  std::vector<float> gates(static_cast<size_t>(n * k));
  moe_gates_forward<float>(gates.data(), P.data(), chosen.data(), n, X, k);

  // Each expert runs once over the rows of the tokens that chose it, in plan
  // order; a token's outputs are added to x in slot order (thread-count independent).
  std::vector<int32_t> order(static_cast<size_t>(n * k)), row(static_cast<size_t>(n * k));
  std::vector<int64_t> offsets(static_cast<size_t>(X + 1));
  moe_dispatch_plan(order.data(), row.data(), offsets.data(), chosen.data(), n, k, X);
  const int64_t H = L.experts.front().up.out;
  std::vector<float> xs(static_cast<size_t>(n * k * D)), ys(static_cast<size_t>(n * k * D)), h;
  for (int64_t r = 0; r < n * k; ++r) std::copy_n(u.data() + order[r] * D, D, xs.data() + r * D);
  for (int64_t e = 0; e < X; ++e) {
    const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
    if (m == 0) continue;
    h.resize(static_cast<size_t>(m * H));
    block_sparse_forward(L.experts[e].up, xs.data() + r0 * D, m, h.data());
    gelu_forward(h.data(), h.data(), m * H);
    block_sparse_forward(L.experts[e].down, h.data(), m, ys.data() + r0 * D);
  }
  moe_combine_forward(x, gates.data(), ys.data(), row.data(), n, k, D, /*accumulate=*/true);
}

void InferModel::Impl::logits(const float* z, int64_t n, float* out) const {
  if (!tied) {
    dense_forward(Dense{head, nullptr}, z, n, out);
    return;
  }
  std::vector<float> s(static_cast<size_t>(n * buckets));
  dense_forward(Dense{table, nullptr}, z, n, s.data());
  hash_head_gather(out, s.data(), importance, bucket_index, n, HashDims{V, hashes, buckets, D});
}

InferModel::InferModel(ShqFile file) : file_(std::move(file)), impl_(std::make_unique<Impl>()) {
  config_ = ModelConfig::from_toml(file_.config_toml(), file_.path() + " (embedded config)");
  const ModelConfig& c = config_;
  Impl& m = *impl_;
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
  b += m.tied ? m.table.bytes() + static_cast<uint64_t>(m.V) * m.hashes * 8 : m.head.bytes();
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

void InferModel::forward(const int32_t* tokens, int64_t n, DecodeState& state, float* logits,
                         bool all_logits) const {
  const Impl& m = *impl_;
  SHAMN_CHECK(n >= 1, "forward needs at least one token");
  SHAMN_CHECK(state.history.size() == m.layers.size(), "decode state is for another model");
  std::vector<float> x(static_cast<size_t>(n * m.D));
  {
    const ProfileScope scope("embed", ProfileCategory::infer);
    m.embed(tokens, n, x.data());
  }
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const Layer& L = m.layers[l];
    {
      const ProfileScope scope(L.mixer_scope, ProfileCategory::infer);
      m.mixer(L, x.data(), n, state.history[l]);
    }
    if (L.has_memory) {
      const ProfileScope scope(L.memory_scope, ProfileCategory::infer);
      m.memory(L, x.data(), n);
    }
    const ProfileScope scope(L.moe_scope, ProfileCategory::infer);
    m.moe_block(L, x.data(), n);
  }
  state.position += n;
  const ProfileScope scope("head", ProfileCategory::infer);
  // Only the rows whose logits are wanted go through the final norm and head.
  const int64_t first = all_logits ? 0 : n - 1;
  std::vector<float> z(static_cast<size_t>((n - first) * m.D));
  rms_norm(x.data() + first * m.D, m.final_gain, n - first, m.D, z.data());
  m.logits(z.data(), n - first, logits);
}

uint64_t InferModel::weight_bytes_per_token() const { return impl_->bytes_per_token; }

uint64_t InferModel::weight_bytes() const {
  uint64_t b = 0;
  for (const ShqTensor& t : file_.tensors()) b += t.bytes;
  return b;
}

}  // namespace shamn
