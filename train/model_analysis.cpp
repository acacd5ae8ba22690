// The driver: windows of the token file through the model, with an observer
// that recomputes each layer's routing and memory reads from their inputs.
#include "train/model_analysis.h"

#include <algorithm>
#include <cmath>

#include "autograd/variable.h"
#include "core/kernels/moe_routing.h"
#include "core/kernels/product_key.h"

namespace shamn {

namespace {

const Tensor& parameter(const Module& m, const std::string& name) {
  for (const NamedVar& p : m.named_parameters())
    if (p.name == name) return p.var.value();
  SHAMN_CHECK(false, "no parameter '", name, "'");
  throw Error("unreachable");
}

// y [N, out] = x [N, in] W^T (+ bias), in double for a fixed order.
std::vector<float> linear(const float* x, int64_t N, const Tensor& w, const Tensor* bias) {
  const int64_t out = w.shape()[0], in = w.shape()[1];
  std::vector<float> y(static_cast<size_t>(N * out));
  const float* W = w.data<float>();
  for (int64_t t = 0; t < N; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? bias->data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(x[t * in + i]) * W[o * in + i];
      y[t * out + o] = static_cast<float>(acc);
    }
  return y;
}

// Recomputes each layer's routing and memory reads from their inputs into a log.
struct Collector : LayerObserver {
  SelectionLog* log = nullptr;

  void memory_input(int64_t layer, const MemoryBank& memory, const Tensor& u) override {
    const MemoryOptions& o = memory.options();
    const int64_t N = u.numel() / o.dim;
    const Tensor& bias = parameter(memory, "query.bias");
    const std::vector<float> q = linear(u.data<float>(), N, parameter(memory, "query.weight"), &bias);
    const ProductKeyDims d{o.sqrt_size(), o.key_dim / 2, o.topk, o.dim};
    std::vector<float> s1(static_cast<size_t>(N * d.n)), s2(s1.size());
    product_key_scores(s1.data(), s2.data(), q.data(), parameter(memory, "keys1").data<float>(),
                       parameter(memory, "keys2").data<float>(), N, d);
    std::vector<int32_t> sl(static_cast<size_t>(N * d.k));
    std::vector<float> w(sl.size());
    product_key_select(sl.data(), w.data(), s1.data(), s2.data(), N, d);
    log->add_memory(layer, o, sl.data(), w.data(), N);
  }

  void moe_input(int64_t layer, const HierarchicalMoE& moe, const Tensor& u, const Tensor& chosen) override {
    const MoeOptions& o = moe.options();
    const int64_t N = u.numel() / o.dim, X = o.experts();
    const std::vector<float> rg = linear(u.data<float>(), N, parameter(moe, "router_group.weight"), nullptr);
    const std::vector<float> re = linear(u.data<float>(), N, parameter(moe, "router_expert.weight"), nullptr);
    std::vector<float> P(static_cast<size_t>(N * X)), pg(static_cast<size_t>(N * o.groups)), pe(P.size());
    const MoeShape shape{o.groups, o.experts_per_group, o.group_k, o.k};
    router_probs_forward(P.data(), pg.data(), pe.data(), rg.data(), re.data(), N, shape);
    // The experts are the forward's own choice; the gates follow from them.
    std::vector<float> g(static_cast<size_t>(N * o.k));
    moe_gates_forward(g.data(), P.data(), chosen.data<int32_t>(), N, X, o.k);
    log->add_moe(layer, o, chosen.data<int32_t>(), g.data(), N);
  }
};

}  // namespace

void SelectionLog::add_moe(int64_t layer, const MoeOptions& o, const int32_t* experts, const float* gates,
                           int64_t n) {
  Moe& m = moe[layer];
  m.k = o.k;
  m.groups = o.groups;
  m.experts_per_group = o.experts_per_group;
  m.experts.insert(m.experts.end(), experts, experts + n * o.k);
  m.gates.insert(m.gates.end(), gates, gates + n * o.k);
}

void SelectionLog::add_memory(int64_t layer, const MemoryOptions& o, const int32_t* slots,
                              const float* weights, int64_t n) {
  Memory& m = memory[layer];
  m.topk = o.topk;
  m.slots = o.size;
  m.read.insert(m.read.end(), slots, slots + n * o.topk);
  m.weights.insert(m.weights.end(), weights, weights + n * o.topk);
}

ModelAnalysis analyze_windows(const TokenFile& data, int64_t V, int64_t windows, int64_t seq_len,
                              const WindowForward& forward) {
  SHAMN_INPUT_CHECK(windows >= 1 && seq_len >= 1, "--windows and --seq-len must be >= 1");
  // (size - 1) / seq_len: seq_len + 1 overflows at the largest --seq-len.
  SHAMN_INPUT_CHECK(data.size() >= 1 && (data.size() - 1) / seq_len >= 1, "token file '", data.path(),
                    "' has ", data.size(), " tokens; one window of --seq-len ", seq_len, " needs one more");
  const int64_t W = std::min(windows, (data.size() - 1) / seq_len);
  ModelAnalysis a;
  a.windows = W;
  a.seq_len = seq_len;

  // Token frequencies over the whole file (ids past the vocabulary are an error).
  std::vector<int64_t> counts(static_cast<size_t>(V), 0);
  for (int64_t i = 0; i < data.size(); ++i) {
    const uint32_t t = data.token(i);
    SHAMN_INPUT_CHECK(t < static_cast<uint32_t>(V), "token file '", data.path(), "': token ", t, " at index ",
                      i, " is not below the model's vocab_size ", V);
    ++counts[t];
  }

  SelectionLog log;
  std::vector<double> losses;
  std::vector<int32_t> targets;
  std::vector<float> logits(static_cast<size_t>(seq_len * V));
  for (int64_t w = 0; w < W; ++w) {
    const Tensor win = data.window(w * seq_len, seq_len + 1, V);
    const int32_t* tok = win.data<int32_t>();
    forward(tok, seq_len, log, logits.data());
    for (int64_t t = 0; t < seq_len; ++t) {
      const float* row = logits.data() + t * V;
      const float m = *std::max_element(row, row + V);
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - m);
      losses.push_back(std::log(z) + m - row[tok[t + 1]]);
      targets.push_back(tok[t + 1]);
    }
  }
  a.tokens = static_cast<int64_t>(losses.size());
  double total = 0;
  for (double x : losses) total += x;
  a.loss = total / static_cast<double>(std::max<int64_t>(1, a.tokens));

  for (const auto& [layer, m] : log.moe)
    a.moe.push_back(moe_stats(layer, m.experts.data(), m.gates.data(),
                              static_cast<int64_t>(m.experts.size()) / m.k, m.k, m.groups,
                              m.experts_per_group));
  for (const auto& [layer, m] : log.memory)
    a.memory.push_back(memory_stats(layer, m.read.data(), m.weights.data(),
                                    static_cast<int64_t>(m.read.size()) / m.topk, m.topk, m.slots));
  a.thirds = frequency_thirds(counts, losses, targets);
  return a;
}

ModelAnalysis analyze_model(const Shamn& model, const TokenFile& data, int64_t windows, int64_t seq_len) {
  const int64_t V = model.config().vocab_size;
  NoGradGuard no_grad;
  ModelAnalysis a = analyze_windows(
      data, V, windows, seq_len, [&](const int32_t* tokens, int64_t T, SelectionLog& log, float* logits) {
        Collector collector;
        collector.log = &log;
        const Tensor in = Tensor::from_data<int32_t>({1, T}, std::span<const int32_t>(tokens, T));
        const Tensor l = model.logits(in, &collector).value();
        std::copy_n(l.data<float>(), T * V, logits);
      });
  a.embed = embedding_stats(model.embed().bucket_index(), model.embed().options().buckets);
  a.block_sparse = block_norm_stats(model);
  return a;
}

}  // namespace shamn
