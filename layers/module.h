#pragma once
// Modules: parameters, buffers and submodules registered under the SPEC names, so
// named_parameters() yields dotted names like "layers.3.moe.experts.7.up.values"
// and a checkpoint maps "." to "/". Modules are not copyable: layers hold their
// parameters as Var handles that share storage with the registry.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "layers/init.h"

namespace shamn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Depth-first in registration order, names prefixed by the submodule path.
  std::vector<NamedVar> named_parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<Var> parameters() const;
  // Every submodule, depth-first in registration order, with its dotted name
  // ("layers.3.mixer.out"); this module itself is not listed.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  int64_t parameter_count() const;

  // No train/eval mode: no SHAMN layer behaves differently in evaluation (the
  // SPEC has no dropout); evaluation only turns gradients off (NoGradGuard).
  // LoRA's dropout is on only where the trainer opens a LoraDropoutPass.

  void zero_grad();

  // Converts every parameter to `dtype` (f32 for training, f64 for gradient checks).
  void to(DType dtype);

  // Initialises this module's parameters and buffers, then its children's. Each
  // tensor draws from its own RNG stream keyed by its full dotted name (see
  // layers/init.h), so the result does not depend on construction order; `how`
  // picks the scheme (train.init).
  void init(uint64_t seed, const WeightInit& how = {}, const std::string& prefix = "");

 protected:
  // Override to initialise this module's own tensors (children are handled by init()).
  virtual void init_own(uint64_t seed, const std::string& prefix, const WeightInit& how) {}

  // Registers a trainable f32 parameter initialised to `init` (shared, not copied).
  Var register_parameter(const std::string& name, Tensor init);
  // Registers a non-trainable tensor saved in checkpoints (e.g. int32 indices).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    add_child(name, std::move(module));
    return ref;
  }

 private:
  void add_child(const std::string& name, std::unique_ptr<Module> module);
  void collect(const std::string& prefix, std::vector<NamedVar>* params,
               std::vector<NamedTensor>* buffers) const;

  std::vector<NamedVar> params_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// Children named "0", "1", ... in order, so names read "experts.7.up.values" or
// "layers.3.moe...".
class ModuleList : public Module {
 public:
  template <class M>
  M& push_back(std::unique_ptr<M> m) {
    return register_module(std::to_string(size_++), std::move(m));
  }
  int64_t size() const { return size_; }

 private:
  int64_t size_ = 0;
};

}  // namespace shamn
