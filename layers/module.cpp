#include "layers/module.h"

namespace shamn {
namespace {
void check_name(const std::string& name) {
  SHAMN_CHECK(!name.empty() && name.find('.') == std::string::npos && name.find('/') == std::string::npos,
              "module member name '", name, "' must be non-empty without '.' or '/'");
}
}  // namespace

Var Module::register_parameter(const std::string& name, Tensor init) {
  check_name(name);
  SHAMN_CHECK(init.dtype() == DType::f32, "parameter '", name, "' must be f32, got ", init.str());
  Var v(std::move(init), true);
  params_.push_back({name, v});
  return v;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name);
  buffers_.push_back({name, tensor});
  return tensor;
}

void Module::add_child(const std::string& name, std::unique_ptr<Module> module) {
  check_name(name);
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, std::vector<NamedVar>* params,
                     std::vector<NamedTensor>* buffers) const {
  if (params)
    for (const NamedVar& p : params_) params->push_back({prefix + p.name, p.var});
  if (buffers)
    for (const NamedTensor& b : buffers_) buffers->push_back({prefix + b.name, b.tensor});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, buffers);
}

std::vector<NamedVar> Module::named_parameters() const {
  std::vector<NamedVar> out;
  collect("", &out, nullptr);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", nullptr, &out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, child] : children_) {
    out.emplace_back(name, child.get());
    for (auto& [below, m] : child->named_modules()) out.emplace_back(name + "." + below, m);
  }
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (auto& [name, m] : const_cast<Module*>(this)->named_modules()) out.emplace_back(name, m);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (NamedVar& p : named_parameters()) out.push_back(std::move(p.var));
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const NamedVar& p : named_parameters()) n += p.var.numel();
  return n;
}

void Module::init(uint64_t seed, const WeightInit& how, const std::string& prefix) {
  init_own(seed, prefix, how);
  for (auto& [name, child] : children_) child->init(seed, how, prefix + name + ".");
}

void Module::to(DType dtype) {
  for (NamedVar& p : named_parameters())
    if (p.var.dtype() != dtype) p.var.replace_value(p.var.value().to(dtype));
}

void Module::zero_grad() {
  for (NamedVar& p : named_parameters()) p.var.zero_grad();
}

}  // namespace shamn
