#include "layers/shamn_model.h"

#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "core/profiler.h"

namespace shamn {

namespace {
// Residual branches' output projections start scaled by 1/sqrt(2L) (GPT-2), so
// the residual stream's variance does not grow with depth at init.
double residual_scale(const ModelConfig& c) { return 1.0 / std::sqrt(2.0 * c.n_layers); }
}  // namespace

ShamnBlock::ShamnBlock(const ModelConfig& c, int64_t index, bool with_memory) : index_(index) {
  const std::string prefix = "layers." + std::to_string(index) + ".";
  mixer_scope_ = profile_intern(prefix + "mixer");
  memory_scope_ = profile_intern(prefix + "memory");
  moe_scope_ = profile_intern(prefix + "moe");
  mix_norm_ = &register_module("mix_norm", std::make_unique<RMSNorm>(c.dim));
  mixer_ = &register_module("mixer", std::make_unique<CausalConvMixer>(c.mixer(), residual_scale(c)));
  if (with_memory) {
    mem_norm_ = &register_module("mem_norm", std::make_unique<RMSNorm>(c.dim));
    memory_ = &register_module("memory", std::make_unique<MemoryBank>(c.memory()));
  }
  moe_norm_ = &register_module("moe_norm", std::make_unique<RMSNorm>(c.dim));
  moe_ = &register_module("moe", std::make_unique<HierarchicalMoE>(c.moe(), residual_scale(c)));
}

Var ShamnBlock::forward(const Var& x_in, std::vector<Var>* aux, LayerObserver* observer) const {
  // Each profiler scope covers a branch with its norm and residual add.
  Var x;
  {
    const ProfileLayerScope scope(mixer_scope_, ProfileCategory::forward);
    x = mixer_->forward(mix_norm_->forward(x_in), x_in);  // x_in + the mixer's output
  }
  if (memory_) {
    const ProfileLayerScope scope(memory_scope_, ProfileCategory::forward);
    const Var u = mem_norm_->forward(x);
    if (observer) observer->memory_input(index_, *memory_, u.value());
    x = memory_->forward(u, x);  // x + the memory's output
  }
  const ProfileLayerScope scope(moe_scope_, ProfileCategory::forward);
  const Var u = moe_norm_->forward(x);
  const HierarchicalMoE::Output moe = moe_->forward(u, x);  // x + the experts' output
  if (observer) observer->moe_input(index_, *moe_, u.value(), moe.experts);
  aux->push_back(moe.aux);
  return moe.y;
}

Shamn::Shamn(const ModelConfig& c) : config_(c) {
  c.validate();
  embed_ = &register_module("embed", std::make_unique<SparseHashEmbedding>(c.embed()));
  auto& list = register_module("layers", std::make_unique<ModuleList>());
  for (int64_t l = 0; l < c.n_layers; ++l)
    layers_.push_back(&list.push_back(std::make_unique<ShamnBlock>(c, l, c.has_memory(l))));
  final_norm_ = &register_module("final_norm", std::make_unique<RMSNorm>(c.dim));
  if (!c.tie_head)
    head_ = &register_module("head", std::make_unique<Linear>(c.dim, c.vocab_size, false, 0.02));
}

Var Shamn::hidden(const Tensor& tokens, std::vector<Var>* aux, LayerObserver* observer) const {
  SHAMN_CHECK(tokens.dtype() == DType::i32 && tokens.dim() == 2, "model input must be int32 [B, T], got ",
              tokens.str());
  Var x;
  {
    const ProfileLayerScope scope("embed", ProfileCategory::forward);
    x = embed_->forward(tokens);
  }
  for (const ShamnBlock* layer : layers_) x = layer->forward(x, aux, observer);
  const ProfileLayerScope scope("final_norm", ProfileCategory::forward);
  return final_norm_->forward(x);
}

Var Shamn::logits(const Tensor& tokens, LayerObserver* observer) const {
  std::vector<Var> aux;
  const Var z = hidden(tokens, &aux, observer);
  const ProfileLayerScope scope("head", ProfileCategory::forward);
  return head_ ? head_->forward(z) : embed_->logits(z);
}

Shamn::Loss Shamn::loss(const Tensor& tokens, const Tensor& targets) const {
  SHAMN_CHECK(targets.shape() == tokens.shape(), "targets ", targets.str(), " do not match tokens ",
              tokens.str());
  std::vector<Var> aux;
  const Var z = hidden(tokens, &aux);
  Var ce;
  {
    const ProfileLayerScope scope("head", ProfileCategory::forward);
    ce = head_ ? cross_entropy(head_->forward(z), targets) : embed_->cross_entropy(z, targets);
  }
  Var aux_mean = aux.front();
  for (size_t l = 1; l < aux.size(); ++l) aux_mean = add(aux_mean, aux[l]);
  aux_mean = scale(aux_mean, 1.0 / static_cast<double>(aux.size()));
  return {add(ce, scale(aux_mean, config_.moe_aux_coef)), ce, aux_mean};
}

}  // namespace shamn
