// Every layer: a finite-difference gradient check in f64 over its input and all
// its parameters (module converted with to(f64)), and SPEC names.
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/ops.h"
#include "helpers.h"
#include "layers/parameter_counts.h"
#include "layers/shamn_model.h"

using namespace shamn;

namespace {

// Checks d(f)/d(input) and d(f)/d(every parameter) of a module in double.
void check_module(Module& m, const Var& input, const std::function<Var()>& f, int directions = 0) {
  m.to(DType::f64);
  std::vector<Var> leaves;
  if (input.defined()) leaves.push_back(input);
  for (const auto& p : m.named_parameters()) leaves.push_back(p.var);
  GradcheckOptions opts;
  opts.directions = directions;
  const GradcheckResult r = gradcheck_leaves(f, leaves, opts);
  INFO(r.report);
  CHECK(r.ok);
}

ModelConfig tiny_config() {
  return ModelConfig::from_toml(R"([model]
vocab_size = 97
dim = 16
n_layers = 2
[model.embed]
buckets = 23
hashes = 3
[model.sparse]
block = 8
sparsity = 0.5
[model.mixer]
kernel = 3
[model.memory]
layers = [1]
size = 36
topk = 3
key_dim = 8
[model.moe]
groups = 2
experts_per_group = 2
hidden = 16
)",
                                "tiny");
}

}  // namespace

TEST_CASE("RMSNorm layer gradient check", "[layers][gradcheck]") {
  RMSNorm norm(13);
  norm.init(1);
  Var x(test::random_tensor({3, 13}, 1), true);
  check_module(norm, x, [&] { return norm.forward(x); });
}

TEST_CASE("Linear layer gradient check, with and without bias", "[layers][gradcheck]") {
  for (bool bias : {true, false}) {
    Linear lin(7, 5, bias);
    lin.init(2);
    Var x(test::random_tensor({2, 3, 7}, 2), true);
    check_module(lin, x, [&] { return lin.forward(x); });
  }
}

TEST_CASE("BlockSparseLinear layer gradient check", "[layers][gradcheck]") {
  BlockSparseLinear bsl({24, 16, 8, 0.5, true, "model.sparse.sparsity"});
  bsl.init(3);
  Var x(test::random_tensor({5, 24}, 3), true);
  check_module(bsl, x, [&] { return bsl.forward(x); });
}

TEST_CASE("CausalConvMixer layer gradient check", "[layers][gradcheck]") {
  CausalConvMixer mixer(tiny_config().mixer(), 1.0);
  mixer.init(4);
  Var x(test::random_tensor({2, 5, 16}, 4), true);
  check_module(mixer, x, [&] { return mixer.forward(x); });
}

TEST_CASE("MemoryBank layer gradient check", "[layers][gradcheck]") {
  MemoryBank memory(tiny_config().memory());
  memory.init(5);
  Var x(test::random_tensor({2, 4, 16}, 5), true);
  check_module(memory, x, [&] { return memory.forward(x); });
}

TEST_CASE("SparseHashEmbedding and tied head gradient check", "[layers][gradcheck]") {
  SparseHashEmbedding embed(tiny_config().embed());
  embed.init(6);
  const Tensor tokens = test::random_indices({2, 5}, 97, 6);
  const Tensor targets = test::random_indices({2, 5}, 97, 7);
  check_module(embed, Var(), [&] { return embed.forward(tokens); });
  Var z(test::random_tensor({2, 5, 16}, 8), true);
  check_module(embed, z, [&] { return embed.logits(z); });
  check_module(embed, z, [&] { return embed.cross_entropy(z, targets); });
}

TEST_CASE("Shamn model gradient check (random directions)", "[layers][gradcheck][model]") {
  Shamn model(tiny_config());
  model.init(9);
  const Tensor tokens = test::random_indices({2, 6}, 97, 9);
  const Tensor targets = test::random_indices({2, 6}, 97, 10);
  check_module(
      model, Var(), [&] { return model.loss(tokens, targets).loss; }, 3);
}

TEST_CASE("Shamn parameter names and shapes follow SPEC section 4", "[layers][model]") {
  Shamn model(tiny_config());
  std::map<std::string, Shape> shapes;
  for (const auto& p : model.named_parameters()) shapes[p.name] = p.var.shape();
  for (const auto& b : model.named_buffers()) shapes[b.name] = b.tensor.shape();
  CHECK(shapes.at("embed.table") == Shape{23, 16});
  CHECK(shapes.at("embed.importance") == Shape{97, 3});
  CHECK(shapes.at("embed.bucket_index") == Shape{97, 3});
  CHECK(shapes.at("layers.0.mix_norm.gain") == Shape{16});
  CHECK(shapes.at("layers.0.mixer.conv") == Shape{16, 3});
  CHECK(shapes.at("layers.0.mixer.out.values") == Shape{2, 1, 8, 8});
  CHECK(shapes.at("layers.0.mixer.out.col_index") == Shape{2, 1});
  CHECK(shapes.at("layers.0.mixer.out.bias") == Shape{16});
  CHECK(shapes.count("layers.0.memory.keys1") == 0);
  CHECK(shapes.count("layers.0.mem_norm.gain") == 0);
  CHECK(shapes.at("layers.1.mem_norm.gain") == Shape{16});
  CHECK(shapes.at("layers.1.memory.query.weight") == Shape{8, 16});
  CHECK(shapes.at("layers.1.memory.query.bias") == Shape{8});
  CHECK(shapes.at("layers.1.memory.keys1") == Shape{6, 4});
  CHECK(shapes.at("layers.1.memory.keys2") == Shape{6, 4});
  CHECK(shapes.at("layers.1.memory.values") == Shape{36, 16});
  CHECK(shapes.at("layers.1.moe_norm.gain") == Shape{16});
  CHECK(shapes.at("layers.1.moe.router_group.weight") == Shape{2, 16});
  CHECK(shapes.at("layers.1.moe.router_expert.weight") == Shape{4, 16});
  CHECK(shapes.at("layers.1.moe.experts.3.up.values") == Shape{2, 1, 8, 8});
  CHECK(shapes.at("layers.1.moe.experts.3.down.col_index") == Shape{2, 1});
  CHECK(shapes.at("final_norm.gain") == Shape{16});
  CHECK(shapes.count("head.weight") == 0);
}

TEST_CASE("Shamn's loss is its logits' cross-entropy plus aux_coef times the layers' mean aux",
          "[layers][model]") {
  ModelConfig c = tiny_config();
  c.n_layers = 3;
  c.moe_aux_coef = 0.5;
  c.validate();
  Shamn m(c);
  m.init(7);
  const int64_t B = 2, T = 8, V = c.vocab_size;
  const Tensor tokens = test::random_indices({B, T}, V, 3);
  const Tensor targets = test::random_indices({B, T}, V, 4);
  NoGradGuard no_grad;
  const Shamn::Loss loss = m.loss(tokens, targets);
  std::vector<Var> aux;
  m.hidden(tokens, &aux);
  REQUIRE(aux.size() == 3);
  double mean_aux = 0;
  for (const Var& a : aux) mean_aux += a.value().item() / 3.0;
  // The head's fused cross-entropy against one written out from the logits, in double.
  const Tensor logits = m.logits(tokens).value();
  const float* z = logits.data<float>();
  double ce = 0;
  for (int64_t r = 0; r < B * T; ++r) {
    double top = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; ++v) top = std::max(top, static_cast<double>(z[r * V + v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[r * V + v]) - top);
    ce += top + std::log(sum) - z[r * V + targets.data<int32_t>()[r]];
  }
  ce /= static_cast<double>(B * T);
  CHECK(loss.ce.value().item() == Approx(ce).epsilon(1e-5));
  CHECK(loss.aux.value().item() == Approx(mean_aux).epsilon(1e-6));
  CHECK(loss.loss.value().item() == Approx(ce + 0.5 * mean_aux).epsilon(1e-5));
  CHECK(mean_aux > 0.1);  // so that a sum over layers in place of the mean shows
}

TEST_CASE("Shamn loss at init is close to ln(V) and deterministic per seed", "[layers][model]") {
  Shamn a(tiny_config()), b(tiny_config());
  a.init(42);
  b.init(42);
  const Tensor tokens = test::random_indices({2, 8}, 97, 1);
  const Tensor targets = test::random_indices({2, 8}, 97, 2);
  NoGradGuard no_grad;
  const double la = a.loss(tokens, targets).ce.value().item();
  CHECK(la == b.loss(tokens, targets).ce.value().item());
  CHECK(la == Approx(std::log(97.0)).epsilon(0.05));
}

TEST_CASE("Shamn forward and gradients are bit-identical with 1 and 2 threads",
          "[layers][model][determinism]") {
  test::ThreadCountGuard guard;
  const ModelConfig config = ModelConfig::from_toml(R"([model]
vocab_size = 1000
dim = 64
n_layers = 2
[model.sparse]
block = 16
sparsity = 0.5
[model.memory]
size = 256
topk = 8
[model.moe]
groups = 2
experts_per_group = 4
)",
                                                    "det");
  auto run = [&](int threads) {
    set_num_threads(threads);
    Shamn model(config);
    model.init(3);
    const Tensor tokens = test::random_indices({4, 96}, 1000, 4);
    const Tensor targets = test::random_indices({4, 96}, 1000, 5);
    const auto loss = model.loss(tokens, targets);
    loss.loss.backward();
    std::vector<Tensor> out{loss.loss.value()};
    for (const auto& p : model.named_parameters())
      out.push_back(p.var.grad().defined() ? p.var.grad() : Tensor::zeros({1}));
    return out;
  };
  const auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("tensor " << i);
    CHECK(bitwise_equal(one[i], two[i]));
  }
}

TEST_CASE("an untied head has head.weight and trains through it", "[layers][model]") {
  ModelConfig c = tiny_config();
  c.tie_head = false;
  Shamn model(c);
  model.init(1);
  bool found = false;
  for (const auto& p : model.named_parameters()) found |= p.name == "head.weight";
  CHECK(found);
  const Tensor tokens = test::random_indices({1, 4}, 97, 1);
  model.loss(tokens, tokens).loss.backward();
  for (const auto& p : model.named_parameters())
    if (p.name == "head.weight") CHECK(p.var.grad().vector<float>().norm() > 0);
}

TEST_CASE("touched per token counts a token's own embedding rows when the head is untied",
          "[layers][counts]") {
  std::string untied_toml = tiny_config().to_toml();
  untied_toml.replace(untied_toml.find("tie_head = true"), 15, "tie_head = false");
  const Shamn tied(tiny_config()), untied(ModelConfig::from_toml(untied_toml, "untied"));
  const ParameterCounts a = count_parameters(tied), b = count_parameters(untied);
  int64_t table = 0, importance = 0;
  for (const NamedVar& p : tied.named_parameters()) {
    if (p.name == "embed.table") table = p.var.numel();
    if (p.name == "embed.importance") importance = p.var.numel();
  }
  const int64_t head = b.stored - a.stored, hashes = 3, dim = 16;
  REQUIRE(head == 97 * 16);
  // Tied, the head scores every token: the whole table and importance count.
  // Untied, a token reads its 3 rows and 3 importances, and the dense head whole.
  CHECK(a.touched_per_token - b.touched_per_token == (table + importance) - (hashes * dim + hashes) - head);
}
