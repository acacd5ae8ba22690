#pragma once
// The SHAMN model (SPEC section 1):
//   x = HashEmbedding(tokens)
//   for each layer l: x += Mixer(mix_norm(x)); x += Memory(mem_norm(x)) (memory
//   layers only); x += MoE(moe_norm(x))
//   logits = HashHead(final_norm(x)); loss = CE + moe.aux_coef * mean_l aux_l
#include <vector>

#include "core/model_config.h"
#include "layers/causal_conv_mixer.h"
#include "layers/hierarchical_moe.h"
#include "layers/linear.h"
#include "layers/memory_bank.h"
#include "layers/rms_norm.h"
#include "layers/sparse_hash_embedding.h"

namespace shamn {

// Sees the inputs of each layer's sparse parts during a forward pass, for
// `shamn analyze`: the memory's and the MoE's normalised inputs u [B, T, D]
// and the experts the MoE chose [B*T, k]. The forward itself is unchanged.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void memory_input(int64_t layer, const MemoryBank& memory, const Tensor& u) = 0;
  virtual void moe_input(int64_t layer, const HierarchicalMoE& moe, const Tensor& u,
                         const Tensor& experts) = 0;
};

class ShamnBlock : public Module {
 public:
  // `index`: the layer's number, for its profiler scopes ("layers.3.moe").
  ShamnBlock(const ModelConfig& config, int64_t index, bool with_memory);
  // x: [B, T, D]; appends this layer's MoE aux loss to *aux.
  Var forward(const Var& x, std::vector<Var>* aux, LayerObserver* observer = nullptr) const;

 private:
  RMSNorm* mix_norm_;
  CausalConvMixer* mixer_;
  RMSNorm* mem_norm_ = nullptr;
  MemoryBank* memory_ = nullptr;
  RMSNorm* moe_norm_;
  HierarchicalMoE* moe_;
  const char* mixer_scope_;
  const char* memory_scope_;
  const char* moe_scope_;
  int64_t index_;
};

class Shamn : public Module {
 public:
  explicit Shamn(const ModelConfig& config);

  struct Loss {
    Var loss;  // ce + aux_coef * aux
    Var ce;    // mean cross-entropy
    Var aux;   // mean over layers of the MoE load-balance loss
  };
  // tokens, targets: int32 [B, T]
  Loss loss(const Tensor& tokens, const Tensor& targets) const;
  // final_norm(x): [B, T, D]
  Var hidden(const Tensor& tokens, std::vector<Var>* aux, LayerObserver* observer = nullptr) const;
  Var logits(const Tensor& tokens, LayerObserver* observer = nullptr) const;  // [B, T, V]
  const SparseHashEmbedding& embed() const { return *embed_; }

  const ModelConfig& config() const { return config_; }

 private:
  ModelConfig config_;
  SparseHashEmbedding* embed_;
  std::vector<ShamnBlock*> layers_;
  RMSNorm* final_norm_;
  Linear* head_ = nullptr;  // untied head only
};

}  // namespace shamn
