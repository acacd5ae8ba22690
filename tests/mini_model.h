#pragma once
// The smallest model with every kind of tensor that the checkpoint, sweep and
// fuzz tests share: quick to build, parse and save. No test framework here, so
// the libFuzzer targets include it too.
namespace shamn::test {

inline constexpr const char* kMiniModelToml = R"([model]
vocab_size = 64
dim = 16
n_layers = 2
[model.sparse]
block = 8
sparsity = 0.5
[model.memory]
size = 16
topk = 2
[model.moe]
groups = 2
experts_per_group = 2
)";

}  // namespace shamn::test
