#include "layers/parameter_counts.h"

namespace shamn {

ParameterCounts count_parameters(const Shamn& model) {
  const ModelConfig& c = model.config();
  const MemoryOptions mem = c.memory();
  const MoeOptions moe = c.moe();
  ParameterCounts out;
  int64_t expert_params = 0;
  for (const NamedVar& p : model.named_parameters()) {
    const int64_t n = p.var.numel();
    out.stored += n;
    if (p.name.find(".moe.experts.") != std::string::npos) {
      expert_params += n;
    } else if (p.name.size() >= 14 && p.name.compare(p.name.size() - 14, 14, ".memory.values") == 0) {
      out.touched_per_token += mem.topk * mem.dim;
    } else if (!c.tie_head && p.name == "embed.table") {
      out.touched_per_token += c.embed_hashes * c.dim;
    } else if (!c.tie_head && p.name == "embed.importance") {
      out.touched_per_token += c.embed_hashes;
    } else {
      out.touched_per_token += n;
    }
  }
  out.touched_per_token += expert_params * moe.k / moe.experts();
  for (const NamedTensor& b : model.named_buffers()) out.buffers += b.tensor.numel();
  return out;
}

}  // namespace shamn
