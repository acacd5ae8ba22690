#pragma once
// The model of the checkpoint fuzz target and its seed: as small as a model
// with every tensor kind (hashed embedding, block-sparse mixer, product-key
// memory, MoE) gets, so the seed stays small and each load is quick.
namespace shamn::fuzz {

inline constexpr const char* kCheckpointModelToml = R"([model]
vocab_size = 16
dim = 8
n_layers = 1
[model.embed]
buckets = 8
[model.sparse]
block = 4
sparsity = 0.5
[model.memory]
size = 4
topk = 1
key_dim = 2
[model.moe]
groups = 1
experts_per_group = 2
group_k = 1
k = 1
hidden = 8
)";

}  // namespace shamn::fuzz
