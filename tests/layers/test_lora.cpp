// LoRA adapters (layers/lora.h, autograd/ops_lora.h): finite-difference gradient
// checks of the low-rank op and of adapted layers and models, step 0 equal to the
// base bit for bit, target patterns, freezing and the base's checksum.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "autograd/ops.h"
#include "autograd/ops_lora.h"
#include "core/check.h"
#include "helpers.h"
#include "layers/lora.h"
#include "layers/shamn_model.h"

using namespace shamn;

namespace {

ModelConfig lora_model_config() {
  return ModelConfig::from_toml(R"([model]
vocab_size = 97
dim = 16
n_layers = 2
[model.embed]
buckets = 23
[model.sparse]
block = 8
sparsity = 0.5
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
                                "lora test");
}

LoraOptions every_kind(int64_t rank = 3, double alpha = 6.0, double dropout = 0) {
  return {rank,
          alpha,
          {"layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.router_group",
           "layers.*.moe.router_expert", "layers.*.moe.experts.*.up", "layers.1.moe.experts.1.down"},
          false,
          dropout};
}

// B made non-zero, so every adapter gradient (A's included) is non-trivial.
void randomise_b(Module& model, uint64_t seed) {
  for (NamedVar& p : lora_parameters(model))
    if (p.name.ends_with("lora_b"))
      p.var.value().copy_from(test::random_tensor(p.var.shape(), seed++, DType::f32, -0.3, 0.3));
}

// The test model in f64 with adapters on `lora`'s targets, B random, the base frozen.
std::unique_ptr<Shamn> gradcheck_model(const LoraOptions& lora) {
  auto model = std::make_unique<Shamn>(lora_model_config());
  model->init(9);
  attach_lora(*model, model->config(), lora);
  init_lora_adapters(*model, 9);
  randomise_b(*model, 30);
  freeze_base(*model);
  model->to(DType::f64);
  return model;
}

void check_leaves(const std::function<Var()>& f, const std::vector<Var>& leaves, int directions = 0) {
  GradcheckOptions opts;
  opts.directions = directions;
  const GradcheckResult r = gradcheck_leaves(f, leaves, opts);
  INFO(r.report);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("add_low_rank_segments gradient check: several segments, an empty one, one without adapter",
          "[layers][lora][gradcheck]") {
  const std::vector<int64_t> offsets = {0, 3, 3, 7, 9};  // segment 1 is empty, segment 2 has no adapter
  // y is summed into in place, so each call gets a fresh copy of in[7] (scale makes one).
  auto f = [&](const std::vector<Var>& in) {
    return add_low_rank_segments(scale(in[7], 1.0), in[0], offsets,
                                 {{in[1], in[2]}, {in[3], in[4]}, {}, {in[5], in[6]}}, 1.7);
  };
  const std::vector<Tensor> inputs = {test::random_tensor({9, 6}, 1), test::random_tensor({2, 6}, 2),
                                      test::random_tensor({5, 2}, 3), test::random_tensor({3, 6}, 4),
                                      test::random_tensor({5, 3}, 5), test::random_tensor({2, 6}, 6),
                                      test::random_tensor({5, 2}, 7), test::random_tensor({9, 5}, 8)};
  test::check_gradients(f, inputs);

  // The rows of the segment without an adapter are y's; an empty segment's
  // adapter gets no gradient, as if it had not run.
  std::vector<Var> in;
  for (const Tensor& t : inputs) in.emplace_back(t.clone(), true);
  const Var y = f(in);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const bool plain = i / 5 >= 3 && i / 5 < 7;
    CHECK((y.value().item(i) == inputs[7].item(i)) == plain);
  }
  sum(y).backward();
  CHECK(in[1].grad().defined());
  CHECK_FALSE(in[3].grad().defined());
  CHECK_FALSE(in[4].grad().defined());
  CHECK(test::max_abs_diff(in[7].grad(), Tensor::full({9, 5}, 1.0, DType::f64)) == 0.0);
}

TEST_CASE("add_low_rank_segments checks its operands", "[layers][lora]") {
  Var x(test::random_tensor({4, 6}, 1)), y(test::random_tensor({4, 5}, 4));
  Var a(test::random_tensor({2, 6}, 2)), b(test::random_tensor({5, 2}, 3));
  CHECK_THROWS_WITH(add_low_rank_segments(y, x, {0, 4}, {{a, Var()}}, 1.0),
                    Catch::Contains("only one of A and B"));
  CHECK_THROWS_WITH(add_low_rank_segments(Var(test::random_tensor({4, 4}, 4)), x, {0, 4}, {{a, b}}, 1.0),
                    Catch::Contains("want A [rank, 6] and B [4, rank]"));
  CHECK_THROWS_WITH(add_low_rank_segments(y, x, {0, 3}, {{a, b}}, 1.0), Catch::Contains("offsets span"));
  CHECK_THROWS_WITH(
      add_low_rank_segments(Var(test::random_tensor({4, 5}, 4), true), x, {0, 4}, {{a, b}}, 1.0),
      Catch::Contains("cannot be a leaf that needs a gradient"));
}

TEST_CASE("adapted Linear and BlockSparseLinear gradient checks", "[layers][lora][gradcheck]") {
  SECTION("Linear") {
    Linear lin(7, 5, true);
    lin.add_lora(2, 3.0);
    lin.init(2);
    randomise_b(lin, 10);
    lin.to(DType::f64);
    Var x(test::random_tensor({2, 3, 7}, 2), true);
    std::vector<Var> leaves{x};
    for (const NamedVar& p : lin.named_parameters()) leaves.push_back(p.var);
    check_leaves([&] { return lin.forward(x); }, leaves);
  }
  SECTION("BlockSparseLinear") {
    BlockSparseLinear bsl({24, 16, 8, 0.5, true, "model.sparse.sparsity"});
    bsl.add_lora(3, 1.5);
    bsl.init(3);
    randomise_b(bsl, 20);
    bsl.to(DType::f64);
    Var x(test::random_tensor({5, 24}, 3), true);
    std::vector<Var> leaves{x};
    for (const NamedVar& p : bsl.named_parameters()) leaves.push_back(p.var);
    check_leaves([&] { return bsl.forward(x); }, leaves);
  }
}

TEST_CASE("an adapted model's gradients: adapters only, finite differences over every kind of target",
          "[layers][lora][gradcheck][model]") {
  const std::unique_ptr<Shamn> adapted = gradcheck_model(every_kind());
  Shamn& model = *adapted;
  const Tensor tokens = test::random_indices({2, 6}, 97, 9);
  const Tensor targets = test::random_indices({2, 6}, 97, 10);
  const std::vector<NamedVar> adapters = lora_parameters(model);
  REQUIRE(adapters.size() == 2 * (2 + 1 + 2 + 2 + 2 * 4 + 1));  // per kind: hosts x {a, b}
  std::vector<Var> leaves;
  for (const NamedVar& p : adapters) leaves.push_back(p.var);
  check_leaves([&] { return model.loss(tokens, targets).loss; }, leaves, 3);

  // The frozen base gets no gradient at all.
  model.zero_grad();
  model.loss(tokens, targets).loss.backward();
  for (const NamedVar& p : model.named_parameters()) {
    INFO(p.name);
    CHECK(p.var.grad().defined() == is_lora_parameter(p.name));
  }
}

TEST_CASE("LoRA dropout: inside a pass the adapter reads dropout(x), the base x, and outside one no dropout",
          "[layers][lora][dropout]") {
  Linear lin(9, 5, true);
  lin.add_lora(2, 3.0);
  lin.set_lora_dropout(0.4, "lin");
  lin.init(2);
  randomise_b(lin, 10);
  const Var x(test::random_tensor({3, 9}, 2, DType::f32));
  const Tensor plain = lin.forward(x).value();
  Tensor dropped;
  {
    const LoraDropoutPass pass(lin, 1, 0);
    REQUIRE(lin.lora_dropout_key().has_value());
    const DropoutKey key = *lin.lora_dropout_key();
    dropped = lin.forward(x).value();
    // The slow way: W x + bias + scale * B (A (x * mask / (1 - p))), in double.
    Tensor xd = x.value().to(DType::f64);
    for (int64_t i = 0; i < xd.numel(); ++i)
      xd.set_item(i, dropout_keeps(0.4, key, static_cast<uint64_t>(i)) ? xd.item(i) / 0.6 : 0.0);
    const Tensor A = lin.lora().a.value(), B = lin.lora().b.value();
    const Tensor W = lin.weight().value(), bias = lin.bias().value();
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t o = 0; o < 5; ++o) {
        double base = bias.item(o), low = 0;
        for (int64_t i = 0; i < 9; ++i) base += W.item(o * 9 + i) * x.value().item(r * 9 + i);
        for (int64_t k = 0; k < 2; ++k) {
          double t = 0;
          for (int64_t i = 0; i < 9; ++i) t += A.item(k * 9 + i) * xd.item(r * 9 + i);
          low += B.item(o * 2 + k) * t;
        }
        CHECK(dropped.item(r * 5 + o) == Approx(base + lin.lora_scale() * low).margin(1e-5));
      }
    // Another pass of the run, other masks.
    const LoraDropoutPass next(lin, 1, 1);
    CHECK_FALSE(bitwise_equal(lin.forward(x).value(), dropped));
  }
  CHECK_FALSE(lin.lora_dropout_key().has_value());
  CHECK_FALSE(bitwise_equal(dropped, plain));
  CHECK(bitwise_equal(lin.forward(x).value(), plain));  // the pass is over: evaluation sees x
}

TEST_CASE("an adapted model's gradients under LoRA dropout: finite differences with the masks of one pass",
          "[layers][lora][gradcheck][model][dropout]") {
  const std::unique_ptr<Shamn> adapted = gradcheck_model(every_kind(3, 6.0, 0.3));
  Shamn& model = *adapted;
  const Tensor tokens = test::random_indices({2, 6}, 97, 9);
  const Tensor targets = test::random_indices({2, 6}, 97, 10);
  const double plain = model.loss(tokens, targets).loss.value().item();
  const LoraDropoutPass pass(model, 4, 2);
  // Every adapted layer draws masks now, and the loss moves.
  int64_t drawing = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto* host = dynamic_cast<LoraHost*>(m); host && host->has_lora()) {
      INFO(name);
      CHECK(host->lora_dropout_key().has_value());
      ++drawing;
    }
  CHECK(drawing == 2 + 1 + 2 + 2 + 2 * 4 + 1);
  CHECK(model.loss(tokens, targets).loss.value().item() != plain);
  std::vector<Var> leaves;
  for (const NamedVar& p : lora_parameters(model)) leaves.push_back(p.var);
  check_leaves([&] { return model.loss(tokens, targets).loss; }, leaves, 3);
}

TEST_CASE("step 0 of an adapted model equals its base bit for bit", "[layers][lora][model]") {
  Shamn base(lora_model_config()), adapted(lora_model_config());
  base.init(4);
  adapted.init(4);
  attach_lora(adapted, adapted.config(), every_kind(4, 32.0));
  init_lora_adapters(adapted, 4);
  const Tensor tokens = test::random_indices({3, 7}, 97, 1);
  const Tensor targets = test::random_indices({3, 7}, 97, 2);
  const Shamn::Loss lb = base.loss(tokens, targets), la = adapted.loss(tokens, targets);
  CHECK(lb.loss.value().item() == la.loss.value().item());
  CHECK(lb.ce.value().item() == la.ce.value().item());
  CHECK(lb.aux.value().item() == la.aux.value().item());
  CHECK(test::max_abs_diff(base.logits(tokens).value(), adapted.logits(tokens).value()) == 0.0);

  // A is random (the adapters are live), B is zero: a non-zero B changes the output.
  for (const NamedVar& p : lora_parameters(adapted)) {
    double sum_abs = 0;
    for (int64_t i = 0; i < p.var.numel(); ++i) sum_abs += std::abs(p.var.value().item(i));
    CHECK((p.name.ends_with("lora_a") ? sum_abs > 0 : sum_abs == 0));
  }
  randomise_b(adapted, 5);
  CHECK(adapted.loss(tokens, targets).loss.value().item() != lb.loss.value().item());
}

TEST_CASE("adapter init is per tensor name: A from its own Philox stream, independent of the others",
          "[layers][lora]") {
  Shamn one(lora_model_config()), two(lora_model_config());
  attach_lora(one, one.config(), every_kind());
  attach_lora(two, two.config(), {3, 6.0, {"layers.1.moe.experts.*.up"}});
  init_lora_adapters(one, 7);
  init_lora_adapters(two, 7);
  const std::string name = "layers.1.moe.experts.2.up.lora_a";
  Tensor a1, a2;
  for (const NamedVar& p : lora_parameters(one))
    if (p.name == name) a1 = p.var.value();
  for (const NamedVar& p : lora_parameters(two))
    if (p.name == name) a2 = p.var.value();
  REQUIRE(a1.defined());
  REQUIRE(a2.defined());
  CHECK(test::max_abs_diff(a1, a2) == 0.0);
  const double bound = 1.0 / std::sqrt(16.0);
  for (int64_t i = 0; i < a1.numel(); ++i) CHECK(std::abs(a1.item(i)) <= bound);
}

TEST_CASE("adapter names and shapes: <module>.lora_a [rank, in], <module>.lora_b [out, rank]",
          "[layers][lora]") {
  Shamn model(lora_model_config());
  attach_lora(model, model.config(), {4, 8.0, {"layers.0.mixer.out", "layers.1.memory.query"}});
  std::map<std::string, Shape> shapes;
  for (const NamedVar& p : lora_parameters(model)) shapes[p.name] = p.var.shape();
  CHECK(shapes == std::map<std::string, Shape>{{"layers.0.mixer.out.lora_a", {4, 16}},
                                               {"layers.0.mixer.out.lora_b", {16, 4}},
                                               {"layers.1.memory.query.lora_a", {4, 16}},
                                               {"layers.1.memory.query.lora_b", {8, 4}}});
}

TEST_CASE("lora_host_names lists exactly the model's adaptable layers, in order", "[layers][lora]") {
  for (const bool tied : {true, false}) {
    ModelConfig c = lora_model_config();
    c.tie_head = tied;
    Shamn model(c);
    std::vector<std::string> hosts;
    for (const auto& [name, m] : model.named_modules())
      if (dynamic_cast<const LoraHost*>(m)) hosts.push_back(name);
    CHECK(hosts == lora_host_names(c));
    CHECK((std::find(hosts.begin(), hosts.end(), "head") != hosts.end()) == !tied);
  }
}

TEST_CASE("target patterns: `*` is one name component", "[layers][lora]") {
  CHECK(lora_pattern_matches("layers.*.mixer.out", "layers.3.mixer.out"));
  CHECK(lora_pattern_matches("layers.*.moe.experts.*.up", "layers.0.moe.experts.12.up"));
  CHECK(lora_pattern_matches("layers.1*.mixer.out", "layers.12.mixer.out"));
  CHECK(lora_pattern_matches("layers.*.moe.router_*", "layers.0.moe.router_expert"));
  CHECK(lora_pattern_matches("*.*.*.*", "layers.0.mixer.out"));
  CHECK_FALSE(lora_pattern_matches("layers.*", "layers.3.mixer.out"));
  CHECK_FALSE(lora_pattern_matches("layers.*.out", "layers.3.mixer.out"));
  CHECK_FALSE(lora_pattern_matches("layers.1*.mixer.out", "layers.3.mixer.out"));
  CHECK_FALSE(lora_pattern_matches("layers.3.mixer", "layers.3.mixer.out"));

  const ModelConfig c = lora_model_config();
  CHECK(select_lora_hosts({"layers.*.moe.router_*"}, c) ==
        std::vector<std::string>{"layers.0.moe.router_group", "layers.0.moe.router_expert",
                                 "layers.1.moe.router_group", "layers.1.moe.router_expert"});
  // Overlapping patterns select each layer once.
  CHECK(select_lora_hosts({"layers.0.mixer.out", "layers.*.mixer.out"}, c).size() == 2);
  CHECK_THROWS_WITH(select_lora_hosts({"layers.*.memory.query", "layers.0.memory.query"}, c),
                    Catch::Contains("\"layers.0.memory.query\" matches no layer"));
  CHECK_THROWS_WITH(select_lora_hosts({"layers.*.mixer"}, c), Catch::Contains("matches no layer"));
  CHECK_THROWS_WITH(select_lora_hosts({"head"}, c), Catch::Contains("head (untied head only)"));
  CHECK_THROWS_WITH(select_lora_hosts({""}, c), Catch::Contains("is empty or holds characters"));
  CHECK_THROWS_WITH(select_lora_hosts({"layers/0/mixer/out"}, c), Catch::Contains("lora.targets"));
  CHECK_THROWS_AS(select_lora_hosts({"layers.?.mixer.out"}, c), ConfigError);
}

TEST_CASE("base_checksum: every base tensor counts, the adapters do not", "[layers][lora]") {
  Shamn model(lora_model_config());
  model.init(3);
  attach_lora(model, model.config(), every_kind());
  init_lora_adapters(model, 3);
  const uint32_t crc = base_checksum(model);
  randomise_b(model, 1);
  CHECK(base_checksum(model) == crc);

  Shamn plain(lora_model_config());
  plain.init(3);
  CHECK(base_checksum(plain) == crc);  // the same base, without adapters
  plain.init(4);
  CHECK(base_checksum(plain) != crc);

  // One element of one parameter, and one entry of one int32 buffer.
  for (const bool buffer : {false, true}) {
    Shamn other(lora_model_config());
    other.init(3);
    if (buffer) {
      Tensor ci = other.named_buffers().back().tensor;
      ci.data<int32_t>()[0] ^= 1;
    } else {
      Tensor gain = other.named_parameters().back().var.value();
      gain.data<float>()[0] += 1.0f;
    }
    CHECK(base_checksum(other) != crc);
  }
}
