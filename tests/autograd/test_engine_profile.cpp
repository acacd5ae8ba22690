// With --profile, ops time their forward, the engine times each node's backward
// under its op's name, and nodes recorded inside a layer scope are timed as that
// layer's backward too.
#include <string>

#include "autograd/ops.h"
#include "core/profiler.h"
#include "helpers.h"

using namespace shamn;
using test::random_tensor;

namespace {
const ProfileStat* find_stat(const ProfileReport& r, const std::string& name, ProfileCategory c) {
  for (const ProfileStat& s : r.stats)
    if (s.name == name && s.category == c) return &s;
  return nullptr;
}
}  // namespace

TEST_CASE("profiled ops and backward nodes are attributed to their op and layer", "[autograd][profiler]") {
  Var w(random_tensor({4, 3}, 1, DType::f32), true);
  Var x(random_tensor({2, 4}, 2, DType::f32), false);
  start_profiling();
  Var y;
  {
    const ProfileLayerScope layer("layers.0.mixer", ProfileCategory::forward);
    y = gelu(matmul(x, w));
    CHECK(std::string(y.grad_fn()->layer) == "layers.0.mixer");
  }
  const Var loss = mean(y);  // outside any layer
  CHECK(loss.grad_fn()->layer == nullptr);
  loss.backward();
  stop_profiling();
  const ProfileReport r = profile_report();
  for (const char* op : {"matmul", "gelu", "mean"}) {
    INFO(op);
    const ProfileStat* fwd = find_stat(r, op, ProfileCategory::forward);
    const ProfileStat* bwd = find_stat(r, op, ProfileCategory::backward);
    REQUIRE(fwd);
    REQUIRE(bwd);
    CHECK(fwd->calls == 1);
    CHECK(bwd->calls == 1);
  }
  const ProfileStat* layer_fwd = find_stat(r, "layers.0.mixer", ProfileCategory::forward);
  const ProfileStat* layer_bwd = find_stat(r, "layers.0.mixer", ProfileCategory::backward);
  REQUIRE(layer_fwd);
  REQUIRE(layer_bwd);
  CHECK(layer_bwd->calls == 1);  // gelu then matmul: one run of the layer's nodes
  // The layer's backward holds its two ops' backward.
  CHECK(layer_bwd->total_ns >= find_stat(r, "gelu", ProfileCategory::backward)->total_ns +
                                   find_stat(r, "matmul", ProfileCategory::backward)->total_ns);
  REQUIRE(w.grad().defined());
}

TEST_CASE("without --profile nodes carry no layer and nothing is recorded", "[autograd][profiler]") {
  start_profiling();
  stop_profiling();
  Var w(random_tensor({4, 3}, 1, DType::f32), true);
  Var x(random_tensor({2, 4}, 2, DType::f32), false);
  const ProfileLayerScope layer("layers.0.mixer", ProfileCategory::forward);
  const Var loss = mean(matmul(x, w));
  CHECK(loss.grad_fn()->layer == nullptr);
  loss.backward();
  CHECK(profile_report().stats.empty());
}
