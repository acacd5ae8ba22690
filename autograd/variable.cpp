#include "autograd/variable.h"

#include "autograd/dispatch.h"
#include "core/kernels/elementwise.h"
#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace shamn {
namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence{0};
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  set_requires_grad(requires_grad);
}

void Var::set_requires_grad(bool on) {
  SHAMN_CHECK(is_leaf(), "requires_grad can only be set on a leaf, not on the result of ",
              impl_->grad_fn->name);
  SHAMN_CHECK(!on || is_floating(impl_->value.dtype()), "a ", impl_->value.str(),
              " tensor cannot require a gradient");
  impl_->requires_grad = on;
}

void Var::set_grad(Tensor grad) {
  SHAMN_CHECK(grad.shape() == value().shape() && grad.dtype() == value().dtype(), "set_grad: gradient ",
              grad.str(), " for value ", value().str());
  impl_->grad = std::move(grad);
  impl_->grad_zero_pending = false;
}

void Var::zero_grad() const { impl_->grad_zero_pending = impl_->grad.defined(); }

void Var::fill_pending_zeros() const {
  impl_->grad.zero();
  impl_->grad_zero_pending = false;
}

void Var::replace_value(Tensor value) const {
  SHAMN_CHECK(is_leaf(), "replace_value on a non-leaf (result of ", impl_->grad_fn->name, ")");
  SHAMN_CHECK(!impl_->requires_grad || is_floating(value.dtype()), "a ", value.str(),
              " tensor cannot require a gradient");
  impl_->value = std::move(value);
  impl_->grad = Tensor();
  impl_->grad_zero_pending = false;
}

Node::Node(const char* name_, std::vector<Var> inputs_, std::function<void(Node&)> backward, Shape out_shape_,
           DType out_dtype_)
    : name(name_),
      sequence(g_next_sequence.fetch_add(1, std::memory_order_relaxed)),
      inputs(std::move(inputs_)),
      backward_fn(std::move(backward)),
      out_shape(std::move(out_shape_)),
      out_dtype(out_dtype_) {}

Node::~Node() {
  // Unlink the subgraph iteratively: a long chain of nodes would otherwise be
  // destroyed by recursion as deep as the chain.
  std::vector<Var> pending = std::move(inputs);
  while (!pending.empty()) {
    Var v = std::move(pending.back());
    pending.pop_back();
    VarImpl* impl = v.impl();
    if (impl && v.use_count() == 1 && impl->grad_fn && impl->grad_fn.use_count() == 1) {
      for (Var& in : impl->grad_fn->inputs) pending.push_back(std::move(in));
      impl->grad_fn->inputs.clear();
    }
  }
}

Tensor& Node::input_grad(size_t i) {
  VarImpl* in = inputs[i].impl();
  if (in->grad_fn) {
    Node& producer = *in->grad_fn;
    if (!producer.out_grad.defined())
      producer.out_grad = Tensor::zeros(producer.out_shape, producer.out_dtype);
    return producer.out_grad;
  }
  if (!in->grad.defined()) in->grad = Tensor::zeros(in->value.shape(), in->value.dtype());
  if (in->grad_zero_pending) {
    in->grad.zero();
    in->grad_zero_pending = false;
  }
  return in->grad;
}

Tensor& Node::input_grad_to_write(size_t i, bool* fresh) {
  VarImpl* in = inputs[i].impl();
  Tensor& g = in->grad_fn ? in->grad_fn->out_grad : in->grad;
  *fresh = !g.defined() || (!in->grad_fn && in->grad_zero_pending);
  if (!in->grad_fn) in->grad_zero_pending = false;  // the op writes every element
  if (!g.defined())
    g = in->grad_fn ? Tensor::empty(in->grad_fn->out_shape, in->grad_fn->out_dtype)
                    : Tensor::empty(in->value.shape(), in->value.dtype());
  return g;
}

bool Node::pass_grad_to_input(size_t i) {
  VarImpl* in = inputs[i].impl();
  if (!in->grad_fn || !out_grad.sole_owner()) return false;
  // Another input made by the same op (block_sparse_linear(x, ..., residual = x))
  // would get its gradient written into out_grad while the op still reads it.
  for (size_t j = 0; j < inputs.size(); ++j)
    if (j != i && inputs[j].impl()->grad_fn == in->grad_fn) return false;
  Node& producer = *in->grad_fn;
  if (producer.out_grad.defined() || producer.out_dtype != out_grad.dtype() ||
      shape_numel(producer.out_shape) != out_grad.numel())
    return false;
  producer.out_grad = out_grad.reshape(producer.out_shape);
  return true;
}

void Node::add_out_grad_to(size_t i) {
  dispatch_floating(out_dtype, name, [&](auto zero) {
    using T = decltype(zero);
    axpy(input_grad(i).data<T>(), out_grad.data<T>(), T(1), out_grad.numel());
  });
}

void Node::release() {
  inputs.clear();
  backward_fn = nullptr;
  out_grad = Tensor();
}

Var record(const char* name, Tensor out, std::vector<Var> inputs, std::function<void(Node&)> backward) {
  Var result;
  result.impl_ = std::make_shared<VarImpl>();
  result.impl_->value = std::move(out);
  if (!grad_enabled()) return result;
  const bool any = std::any_of(inputs.begin(), inputs.end(), [](const Var& v) { return v.requires_grad(); });
  if (!any) return result;
  // A non-leaf input is kept as an edge to its producer, without its value:
  // the backward reads only the tensors its op captured, so an intermediate
  // that no op saved is freed as soon as its caller drops it (a residual
  // branch's output, which the add's backward does not read).
  for (Var& in : inputs) {
    if (!in.defined() || in.impl_->grad_fn == nullptr) continue;
    Var edge;
    edge.impl_ = std::make_shared<VarImpl>();
    edge.impl_->requires_grad = in.impl_->requires_grad;
    edge.impl_->grad_fn = in.impl_->grad_fn;
    in = std::move(edge);
  }
  result.impl_->requires_grad = true;
  result.impl_->grad_fn = std::make_shared<Node>(name, std::move(inputs), std::move(backward),
                                                 result.impl_->value.shape(), result.impl_->value.dtype());
  if (profiling()) result.impl_->grad_fn->layer = profile_current_layer();
  return result;
}

void Var::backward() const {
  SHAMN_CHECK(defined(), "backward() on an undefined Var");
  SHAMN_CHECK(numel() == 1, "backward() needs a scalar, got ", value().str(),
              "; pass a seed gradient for a non-scalar");
  backward(Tensor::full(shape(), 1.0, dtype()));
}

void Var::backward(const Tensor& seed) const { backward_impl(seed, nullptr); }

void Var::backward(const BackwardHooks& hooks) const {
  SHAMN_CHECK(defined(), "backward() on an undefined Var");
  SHAMN_CHECK(numel() == 1, "backward() needs a scalar, got ", value().str());
  backward_impl(Tensor::full(shape(), 1.0, dtype()), &hooks);
}

void Var::backward_impl(const Tensor& seed, const BackwardHooks* hooks) const {
  SHAMN_CHECK(defined(), "backward() on an undefined Var");
  SHAMN_CHECK(seed.shape() == shape() && seed.dtype() == dtype(), "backward(): seed ", seed.str(),
              " does not match ", value().str());
  SHAMN_CHECK(requires_grad(),
              "backward() on a value that does not depend on anything that "
              "requires a gradient");
  NoGradGuard no_grad;
  if (is_leaf()) {
    if (!impl_->grad.defined()) impl_->grad = Tensor::zeros(shape(), dtype());
    if (impl_->grad_zero_pending) fill_pending_zeros();
    dispatch_floating(dtype(), "backward", [&](auto zero) {
      using T = decltype(zero);
      impl_->grad.vector<T>() += seed.vector<T>();
    });
    if (hooks && hooks->leaf_done) hooks->leaf_done(*this);
    return;
  }

  // Every node reachable from this one, found without recursion.
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack{impl_->grad_fn.get()};
  order.push_back(impl_->grad_fn);
  seen.insert(impl_->grad_fn.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    SHAMN_CHECK(node->backward_fn != nullptr,
                "backward() through a graph that was already "
                "freed by an earlier backward(); run the forward pass again");
    for (const Var& in : node->inputs) {
      const auto& producer = in.grad_fn();
      if (producer && seen.insert(producer.get()).second) {
        order.push_back(producer);
        stack.push_back(producer.get());
      }
    }
  }
  // A node's inputs were created before it, so decreasing creation order is a
  // valid reverse topological order: the tape played backwards.
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a->sequence > b->sequence; });

  // done_after[k]: the leaves whose last consumer is order[k].
  std::vector<std::vector<Var>> done_after;
  if (hooks && hooks->leaf_done) {
    std::unordered_map<VarImpl*, size_t> last;
    for (size_t k = 0; k < order.size(); ++k)
      for (const Var& in : order[k]->inputs)
        if (in.defined() && in.is_leaf() && in.requires_grad()) last[in.impl()] = k;
    done_after.resize(order.size());
    for (size_t k = 0; k < order.size(); ++k)
      for (const Var& in : order[k]->inputs) {
        auto it = last.find(in.impl());
        if (it != last.end() && it->second == k) {
          done_after[k].push_back(in);
          last.erase(it);  // an input listed twice by one node is reported once
        }
      }
  }

  impl_->grad_fn->out_grad = seed.clone();
  // With --profile, each run of nodes recorded in one layer is timed as that
  // layer's backward (the tape keeps a layer's nodes together), each node as its op.
  std::optional<ProfileScope> layer_scope;
  const char* layer = nullptr;
  for (size_t k = 0; k < order.size(); ++k) {
    Node* node = order[k].get();
    if (profiling() && node->layer != layer) {
      layer_scope.reset();
      layer = node->layer;
      if (layer) layer_scope.emplace(layer, ProfileCategory::backward);
    }
    if (node->out_grad.defined()) {
      const ProfileScope op_scope(node->name, ProfileCategory::backward);
      node->backward_fn(*node);
    }
    node->out_grad = Tensor();  // free each intermediate gradient as soon as it is used
    if (hooks) {
      if (!done_after.empty())
        for (const Var& leaf : done_after[k]) hooks->leaf_done(leaf);
      if (hooks->after_node) hooks->after_node();
    }
  }
  layer_scope.reset();
  for (const auto& node : order) node->release();
}

}  // namespace shamn
