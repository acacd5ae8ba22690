#include "layers/flop_counts.h"

namespace shamn {

namespace {
// One token through a BlockSparseLinear: each of the out/b block rows multiplies
// its `a` active b x b blocks.
int64_t block_sparse_macs(const BlockSparseOptions& o) { return o.out * o.active_blocks() * o.block; }
}  // namespace

FlopCounts count_flops(const ModelConfig& c) {
  const int64_t D = c.dim;
  const MixerOptions mixer = c.mixer();
  const MemoryOptions mem = c.memory();
  const MoeOptions moe = c.moe();
  const EmbedOptions embed = c.embed();
  const int64_t head = embed.tie_head ? embed.buckets * D + c.vocab_size * embed.hashes : c.vocab_size * D;
  int64_t macs = embed.hashes * D + head;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    macs += D * mixer.kernel + block_sparse_macs(mixer.out);
    if (c.has_memory(l)) macs += D * mem.key_dim + mem.sqrt_size() * mem.key_dim + mem.topk * D;
    macs += D * moe.groups + D * moe.experts() +
            moe.k * (block_sparse_macs(moe.up) + block_sparse_macs(moe.down));
  }
  FlopCounts out;
  out.forward_per_token = 2 * macs;
  out.train_per_token = 3 * out.forward_per_token;
  return out;
}

}  // namespace shamn
