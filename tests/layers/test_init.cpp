// The two weight-init schemes (layers/init.h) against the per-tensor table in
// layers/README.md: every parameter of a model with every layer kind is drawn at
// the table's scale, and the table must name every parameter.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "layers/shamn_model.h"

using namespace shamn;

namespace {

ModelConfig config_with_every_layer() {
  return ModelConfig::from_toml(R"([model]
vocab_size = 1000
dim = 128
n_layers = 2
[model.embed]
buckets = 500
tie_head = false
[model.sparse]
block = 16
sparsity = 0.75
[model.mixer]
kernel = 4
[model.memory]
layers = [1]
size = 1024
key_dim = 64
[model.moe]
groups = 2
experts_per_group = 2
hidden = 256
)",
                                "init");
}

struct Expected {
  double value = 0;  // a constant tensor's value, when std == 0
  double std = 0;
};

// layers/README.md's table, written out independently of the layers' code.
Expected expected(const std::string& name, const WeightInit& how, const ModelConfig& c) {
  if (name.ends_with(".gain") || name == "embed.importance") return {1, 0};
  if (name.ends_with(".bias")) return {0, 0};
  const bool normal = how.scheme == InitScheme::normal;
  const double s = how.std;
  if (name.ends_with(".keys1") || name.ends_with(".keys2"))
    return {0, 1 / std::sqrt(static_cast<double>(*c.memory_key_dim / 2))};
  const double residual = 1 / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  const bool residual_output = name.ends_with("mixer.out.values") || name.ends_with(".down.values");
  if (normal) return {0, how.scale_residual && residual_output ? s * residual : s};
  // a*b active inputs of a block-sparse layer with `in` inputs: an expert's up
  // reads dim, its down hidden (hidden != dim here, so a mix-up shows).
  const auto active_inputs = [&](int64_t in) {
    return std::round((1 - c.sparsity) * static_cast<double>(in / c.block)) * c.block;
  };
  if (name == "embed.table" || name == "head.weight" || name.find(".router_") != std::string::npos)
    return {0, 0.02};
  if (name.ends_with("mixer.conv"))
    return {0, 1 / std::sqrt(static_cast<double>(c.mixer_kernel)) / std::sqrt(3.0)};
  if (name.ends_with("mixer.out.values")) return {0, residual / std::sqrt(active_inputs(c.dim))};
  if (name.ends_with(".down.values")) return {0, residual / std::sqrt(active_inputs(*c.moe_hidden))};
  if (name.ends_with(".up.values")) return {0, 1 / std::sqrt(active_inputs(c.dim))};
  if (name.ends_with("memory.query.weight") || name.ends_with("memory.values"))
    return {0, 1 / std::sqrt(static_cast<double>(c.dim))};
  FAIL("layers/README.md's init table does not name parameter " << name);
  return {};
}

void check_scheme(const WeightInit& how) {
  const ModelConfig c = config_with_every_layer();
  Shamn model(c);
  model.init(7, how);
  int checked = 0;
  for (const auto& p : model.named_parameters()) {
    const Tensor& t = p.var.value();
    const Expected e = expected(p.name, how, c);
    const float* x = t.data<float>();
    const int64_t n = t.numel();
    INFO(p.name << " (" << n << " values)");
    if (e.std == 0) {
      for (int64_t i = 0; i < n; ++i) REQUIRE(x[i] == e.value);
    } else {
      double sum = 0, squares = 0;
      for (int64_t i = 0; i < n; ++i) {
        sum += x[i];
        squares += static_cast<double>(x[i]) * x[i];
      }
      const double mean = sum / static_cast<double>(n), rms = std::sqrt(squares / static_cast<double>(n));
      // The sample std's relative standard error is about 1/sqrt(2n): 6 of them.
      CHECK(rms == Approx(e.std).epsilon(6 / std::sqrt(2.0 * static_cast<double>(n))));
      CHECK(std::abs(mean) < 6 * e.std / std::sqrt(static_cast<double>(n)));
    }
    ++checked;
  }
  CHECK(checked == static_cast<int>(model.named_parameters().size()));
}

}  // namespace

TEST_CASE("the normal init draws every weight matrix at train.init_std", "[layers][init]") {
  check_scheme(WeightInit{InitScheme::normal, 0.05});
}

TEST_CASE("the normal init with init_scale_residual draws residual outputs at std / sqrt(2L)",
          "[layers][init]") {
  WeightInit how{InitScheme::normal, 0.05};
  how.scale_residual = true;
  check_scheme(how);
}

TEST_CASE("the fan_in init scales each matrix by its fan-in", "[layers][init]") {
  check_scheme(WeightInit{InitScheme::fan_in, 0.05});
}

TEST_CASE("the init schemes differ and each is deterministic per seed", "[layers][init]") {
  const ModelConfig c = config_with_every_layer();
  Shamn a(c), b(c), f(c);
  a.init(3);
  b.init(3, WeightInit{});
  f.init(3, WeightInit{InitScheme::fan_in, 0.02});
  const auto pa = a.named_parameters(), pb = b.named_parameters(), pf = f.named_parameters();
  bool any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    CHECK(bitwise_equal(pa[i].var.value(), pb[i].var.value()));
    any_differs |= !bitwise_equal(pa[i].var.value(), pf[i].var.value());
  }
  CHECK(any_differs);
}
