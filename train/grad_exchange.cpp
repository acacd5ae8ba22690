#include "train/grad_exchange.h"

#include <cstring>

#include "core/check.h"
#include "core/fault.h"
#include "core/profiler.h"

namespace shamn {

GradientExchange::GradientExchange(const std::vector<NamedVar>& params, size_t bucket_floats)
    : bucket_floats_(bucket_floats) {
  for (const NamedVar& p : params) {
    SHAMN_CHECK(p.var.value().dtype() == DType::f32, "data-parallel training needs f32 parameters; '", p.name,
                "' is ", p.var.value().str());
    params_.push_back(p.var);
  }
}

void GradientExchange::sum_over_ranks(Communicator& comm) {
  bytes_ = 0;
  if (comm.size() == 1) return;
  std::vector<uint8_t> has(params_.size());
  {
    // Time spent here is the slowest rank's lead, not transfer: kept apart in --profile.
    const ProfileScope waiting("wait_for_ranks", ProfileCategory::comm);
    comm.check_in("the gradient exchange");
    fault::pass("train.exchange");
    for (size_t i = 0; i < params_.size(); ++i) has[i] = params_[i].grad().defined() ? 1 : 0;
    comm.max_flags(has);
  }
  const ProfileScope summing("sum_gradients", ProfileCategory::comm);
  std::vector<Var> pending;
  size_t pending_floats = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!has[i]) continue;
    Var& p = params_[i];
    if (!p.grad().defined()) p.set_grad(Tensor::zeros(p.shape()));
    const size_t n = static_cast<size_t>(p.grad().numel());
    bytes_ += static_cast<int64_t>(n * sizeof(float));
    if (n >= bucket_floats_) {  // big enough to travel alone, in place
      comm.sum_tree(p.grad().data<float>(), n);
      continue;
    }
    if (pending_floats + n > bucket_floats_) {
      flush(comm, pending);
      pending.clear();
      pending_floats = 0;
    }
    pending.push_back(p);
    pending_floats += n;
  }
  flush(comm, pending);
}

// Packs the pending gradients into one buffer, sums it, and unpacks.
void GradientExchange::flush(Communicator& comm, const std::vector<Var>& pending) {
  if (pending.empty()) return;
  size_t total = 0;
  for (const Var& p : pending) total += static_cast<size_t>(p.grad().numel());
  bucket_.resize(total);
  size_t at = 0;
  for (const Var& p : pending) {
    const size_t n = static_cast<size_t>(p.grad().numel());
    std::memcpy(bucket_.data() + at, p.grad().data<float>(), n * sizeof(float));
    at += n;
  }
  comm.sum_tree(bucket_.data(), total);
  at = 0;
  for (const Var& p : pending) {
    const size_t n = static_cast<size_t>(p.grad().numel());
    std::memcpy(p.grad().data<float>(), bucket_.data() + at, n * sizeof(float));
    at += n;
  }
}

}  // namespace shamn
