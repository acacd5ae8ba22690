#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/parallel.h"
#include "core/profiler.h"

namespace shamn {

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : groups_(std::move(groups)), options_(options) {
  SHAMN_CHECK(options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 && options_.beta2 < 1,
              "AdamW: betas must lie in [0, 1), got (", options_.beta1, ", ", options_.beta2, ")");
  SHAMN_CHECK(options_.eps > 0, "AdamW: eps must be positive, got ", options_.eps);
  std::set<std::string> names;
  for (const ParamGroup& g : groups_) {
    SHAMN_CHECK(g.weight_decay >= 0, "AdamW: group '", g.name, "' has negative weight decay");
    for (const NamedVar& p : g.params) {
      SHAMN_CHECK(p.var.defined() && p.var.dtype() == DType::f32, "AdamW: parameter '", p.name,
                  "' must be a defined f32 tensor");
      SHAMN_CHECK(names.insert(p.name).second, "AdamW: parameter '", p.name, "' appears twice");
      slots_.push_back(
          {p.var, p.name, g.weight_decay, Tensor::zeros(p.var.shape()), Tensor::zeros(p.var.shape())});
    }
  }
}

namespace {

// theta, grad, m, v: [n]. One AdamW update (SPEC 3) with the bias corrections
// folded into inv_bc1 = 1/(1-b1^t) and inv_sqrt_bc2 = 1/sqrt(1-b2^t), of the
// gradient times grad_scale (gradient clipping's factor: the same float product
// as scaling the gradient in place first). A free function with restrict
// pointers so the compiler vectorises it.
void adamw_update(float* __restrict theta, const float* __restrict grad, float* __restrict m,
                  float* __restrict v, int64_t n, float grad_scale, float b1, float b2, float inv_bc1,
                  float inv_sqrt_bc2, float lr, float eps, float wd) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    theta[i] -= lr * (mi * inv_bc1 / (std::sqrt(vi) * inv_sqrt_bc2 + eps) + wd * theta[i]);
  }
}

}  // namespace

void AdamW::step(double lr, float grad_scale) {
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  int64_t updated = 0;
  for (Slot& s : slots_) {
    const Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    const double t = static_cast<double>(++s.updates);
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(b1, t)));
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(b2, t)));
    updated += s.param.numel();
    float* theta = s.param.value().data<float>();
    const float* grad = g.data<float>();
    float* m = s.m.data<float>();
    float* v = s.v.data<float>();
    parallel_for(0, s.param.numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
      adamw_update(theta + lo, grad + lo, m + lo, v + lo, hi - lo, grad_scale, static_cast<float>(b1),
                   static_cast<float>(b2), inv_bc1, inv_sqrt_bc2, static_cast<float>(lr),
                   static_cast<float>(options_.eps), static_cast<float>(s.weight_decay));
    });
  }
  // adamw_update's formula: 17 FLOPs (the gradient's scale, sqrt and division
  // one each); theta, grad, m and v read, theta, m and v written.
  profile_work(17 * updated, 7 * static_cast<int64_t>(sizeof(float)) * updated);
}

void AdamW::zero_grad() {
  for (Slot& s : slots_) s.param.zero_grad();
}

std::vector<NamedTensor> AdamW::state_tensors() const {
  std::vector<NamedTensor> out;
  for (const Slot& s : slots_) {
    out.push_back({"m." + s.name, s.m});
    out.push_back({"v." + s.name, s.v});
  }
  return out;
}

std::vector<int64_t> AdamW::update_counts() const {
  std::vector<int64_t> out;
  for (const Slot& s : slots_) out.push_back(s.updates);
  return out;
}

void AdamW::set_update_counts(const std::vector<int64_t>& counts) {
  SHAMN_CHECK(counts.size() == slots_.size(), "AdamW: ", counts.size(), " update counts for ", slots_.size(),
              " parameters");
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].updates = counts[i];
}

std::vector<std::pair<std::string, int64_t>> AdamW::late_updates() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Slot& s : slots_)
    if (s.param.has_grad() && s.updates != step_) out.emplace_back(s.name, s.updates);
  return out;
}

std::vector<std::string> AdamW::unreached() const {
  std::vector<std::string> out;
  for (const Slot& s : slots_)
    if (!s.param.has_grad()) out.push_back(s.name);
  return out;
}

void AdamW::load_state(int64_t step, const std::vector<NamedTensor>& tensors,
                       const std::vector<std::string>& unreached,
                       const std::vector<std::pair<std::string, int64_t>>& late) {
  SHAMN_CHECK(step >= 0, "AdamW state: negative step ", step);
  std::map<std::string, int64_t> late_counts;
  for (const auto& [late_name, count] : late) {
    const std::string& name = late_name;  // clang 14 cannot capture a structured binding
    const bool known =
        std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.name == name; });
    SHAMN_CHECK(known && count >= 1 && count < step && late_counts.emplace(name, count).second,
                "AdamW state: late parameter '", name, "' with ", count, " updates at step ", step,
                " (want a parameter of this optimizer's, once, with 1 to ", step - 1, ")");
  }
  std::set<std::string> no_gradient;
  for (const std::string& name : unreached) {
    const bool known =
        std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.name == name; });
    SHAMN_CHECK(known, "AdamW state: unreached parameter '", name, "' is not one of this optimizer's");
    no_gradient.insert(name);
  }
  std::map<std::string, const Tensor*> by_name;
  for (const NamedTensor& t : tensors) {
    SHAMN_CHECK(by_name.emplace(t.name, &t.tensor).second, "AdamW state: tensor '", t.name,
                "' appears twice");
  }
  for (const Slot& s : slots_) {
    for (const char* moment : {"m.", "v."}) {
      const std::string key = moment + s.name;
      auto it = by_name.find(key);
      SHAMN_CHECK(it != by_name.end(), "AdamW state: missing tensor '", key, "'");
      SHAMN_CHECK(it->second->shape() == s.param.shape() && it->second->dtype() == DType::f32,
                  "AdamW state: tensor '", key, "' is ", it->second->str(), " but parameter '", s.name,
                  "' is ", s.param.value().str());
    }
  }
  SHAMN_CHECK(by_name.size() == 2 * slots_.size(), "AdamW state: ", by_name.size() - 2 * slots_.size(),
              " tensors that match no parameter (was it saved for another model?)");
  for (Slot& s : slots_) {
    s.m.copy_from(*by_name["m." + s.name]);
    s.v.copy_from(*by_name["v." + s.name]);
    const bool reached = !no_gradient.count(s.name);
    SHAMN_CHECK(reached || !late_counts.count(s.name), "AdamW state: parameter '", s.name,
                "' is both unreached and late");
    if (reached && !s.param.has_grad()) {
      s.param.set_grad(Tensor::empty(s.param.shape(), DType::f32));
      s.param.zero_grad();  // zeros, filled when first read (as after a step)
    }
    const auto it = late_counts.find(s.name);
    s.updates = !reached ? 0 : it != late_counts.end() ? it->second : step;
  }
  step_ = step;
}

bool takes_weight_decay(const NamedVar& p) {
  auto ends_with = [&](const std::string& suffix) {
    return p.name.size() >= suffix.size() &&
           p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("gain") || ends_with("bias") || ends_with("importance")) return false;
  return p.var.dim() >= 2;
}

std::vector<ParamGroup> split_weight_decay(const std::vector<NamedVar>& params, double weight_decay) {
  ParamGroup decay{"decay", {}, weight_decay};
  ParamGroup no_decay{"no_decay", {}, 0.0};
  for (const NamedVar& p : params) (takes_weight_decay(p) ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

}  // namespace shamn
