#pragma once
// Reverse-mode autograd. A Var is a tensor value plus, when it needs a gradient,
// either a grad buffer (leaf) or the Node that produced it. Ops record a Node only
// when grad mode is on and some input requires a gradient. Var::backward() walks the
// recorded nodes in reverse creation order (no recursion), accumulates into leaf
// .grad() buffers and frees the graph.
//
// Writing an op (see autograd/ops_*.cpp for many examples):
//   Var my_op(const Var& x) {
//     Tensor y = ...forward kernel(x.value())...;
//     return record("my_op", y, {x}, [y](Node& n) {
//       if (n.needs_grad(0)) my_op_backward(n.input_grad(0), n.out_grad, y);  // +=
//     });
//   }
// The backward lambda captures what it needs (Tensors share storage, so capture is
// cheap; n.inputs hold no values of non-leaf inputs), reads n.out_grad (dL/dy) and
// ACCUMULATES into n.input_grad(i), which is
// zero-filled on first use. Never capture the output Var itself (that would be a cycle).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace shamn {

class Node;
struct BackwardHooks;

struct VarImpl {
  Tensor value;
  Tensor grad;  // leaves only; allocated (zeroed) on first accumulation
  // zero_grad() was called and nothing has written grad since: it reads as zeros
  // but its buffer was not filled yet (see Var::zero_grad).
  bool grad_zero_pending = false;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  const Shape& shape() const { return impl_->value.shape(); }
  int64_t size(int64_t d) const { return impl_->value.size(d); }
  int64_t numel() const { return impl_->value.numel(); }
  int64_t dim() const { return impl_->value.dim(); }
  DType dtype() const { return impl_->value.dtype(); }

  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  void set_requires_grad(bool on);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

  // Leaf gradient; undefined until a backward pass reached this leaf.
  const Tensor& grad() const {
    if (impl_->grad_zero_pending) fill_pending_zeros();
    return impl_->grad;
  }
  // Whether a gradient buffer exists, without filling pending zeros.
  bool has_grad() const { return impl_->grad.defined(); }
  // Points the gradient at caller-owned storage (e.g. an arena); must match shape/dtype.
  void set_grad(Tensor grad);
  // Zeroes the gradient, keeping the allocation. Lazily: the buffer is filled
  // when something reads or adds into it, and not at all when the first op of
  // the next backward pass writes every element (Node::input_grad_to_write):
  // for the memory bank's 134 MB of values that is a pass over them saved.
  void zero_grad() const;
  // Replaces a leaf's value (e.g. converting a module to f64 for gradient checks);
  // every handle to this Var sees the new tensor. Drops the gradient.
  void replace_value(Tensor value) const;

  // Gradient of this scalar with respect to every leaf that requires one.
  void backward() const;
  // Vector-Jacobian product: backpropagates `seed` (dL/d this, same shape and dtype).
  void backward(const Tensor& seed) const;
  // backward() that reports its progress (see BackwardHooks).
  void backward(const BackwardHooks& hooks) const;

  // A leaf sharing this value, cut from the graph.
  Var detach() const { return Var(impl_->value, false); }

  VarImpl* impl() const { return impl_.get(); }
  long use_count() const { return impl_.use_count(); }

 private:
  friend Var record(const char*, Tensor, std::vector<Var>, std::function<void(Node&)>);
  void backward_impl(const Tensor& seed, const BackwardHooks* hooks) const;
  void fill_pending_zeros() const;
  std::shared_ptr<VarImpl> impl_;
};

class Node {
 public:
  Node(const char* name, std::vector<Var> inputs, std::function<void(Node&)> backward, Shape out_shape,
       DType out_dtype);
  ~Node();

  const char* name;
  uint64_t sequence;  // creation order: inputs' nodes always have lower numbers
  // The op's inputs: leaves as they are; a non-leaf as an edge to its
  // producer (grad_fn, requires_grad) without its value, which the backward
  // must not read (capture what it needs).
  std::vector<Var> inputs;
  std::function<void(Node&)> backward_fn;
  Shape out_shape;
  DType out_dtype;
  Tensor out_grad;              // dL/d(output), filled by consumers during backward
  const char* layer = nullptr;  // with --profile: the layer scope it was recorded in

  bool needs_grad(size_t i) const { return inputs[i].requires_grad(); }
  // Zero-filled on first use; the op's backward adds its contribution into it.
  Tensor& input_grad(size_t i);
  // For ops that write every element of input i's gradient: when nothing has
  // been added into it yet, a fresh, uninitialised buffer and *fresh = true (the
  // op stores its values: no zero fill, no read-modify-write); else the buffer
  // in use and *fresh = false (the op adds, as into input_grad). The same values
  // either way (0 + g = g; a -0 stays -0 where the sum gave +0). Not for an input
  // listed twice by the op, unless the op writes this one first.
  Tensor& input_grad_to_write(size_t i, bool* fresh);
  // For ops whose gradient reaches input i unchanged (dL/dx_i = dL/dy, the same
  // element count: reshape, the first operand of add): when input i is made by
  // an op that has no gradient yet and nothing else holds out_grad, that op takes
  // out_grad itself (viewed in its shape) and this returns true; else false, and
  // the caller adds out_grad into input_grad(i) as usual. It saves a zero fill
  // and a read-modify-write pass over the gradient; the values are the same
  // (0 + g = g; a -0 arrives as -0 where the sum gave +0).
  bool pass_grad_to_input(size_t i);
  // For an input whose gradient is out_grad itself (a residual fused into the
  // op): hands it over with pass_grad_to_input where it can, and returns true
  // when the op must still add it (add_out_grad_to(i), after its own reads).
  bool out_grad_to_add(size_t i) { return needs_grad(i) && !pass_grad_to_input(i); }
  // input_grad(i) += out_grad (same element count).
  void add_out_grad_to(size_t i);
  // Drops saved tensors and edges (after backward, or on destruction).
  void release();
};

// What a backward pass tells its caller while it runs, so work that waits for
// gradients can start before the whole pass ends (data-parallel training sends
// each gradient as soon as it is complete).
struct BackwardHooks {
  // A leaf's .grad() is final for this pass: no node still to run has it as an
  // input. Called once per leaf on the graph, in the order the leaves complete.
  std::function<void(const Var& leaf)> leaf_done;
  // After each node's backward: a point to poll other work.
  std::function<void()> after_node;
};

// A parameter (or buffer) with its dotted name, e.g. "layers.3.mixer.out.values".
struct NamedVar {
  std::string name;
  Var var;
};

// Records `out` as the result of an op. Without grad mode, or if no input requires
// a gradient, returns a plain leaf and keeps nothing.
Var record(const char* name, Tensor out, std::vector<Var> inputs, std::function<void(Node&)> backward);

bool grad_enabled();

// Disables recording in this thread for its lifetime (evaluation, optimizer steps).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace shamn
