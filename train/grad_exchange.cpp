#include "train/grad_exchange.h"

#include <cstring>

#include "core/check.h"
#include "core/fault.h"
#include "core/profiler.h"

namespace shamn {

namespace {
constexpr size_t kMaxBuckets = 4096;  // Communicator::start_sum_tree's tags
}  // namespace

GradientExchange::GradientExchange(const std::vector<NamedVar>& params, size_t bucket_floats) {
  size_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const NamedVar& p = params[i];
    SHAMN_CHECK(p.var.value().dtype() == DType::f32, "data-parallel training needs f32 parameters; '", p.name,
                "' is ", p.var.value().str());
    params_.push_back(p.var);
    index_[p.var.impl()] = i;
    total += static_cast<size_t>(p.var.numel());
  }
  // A bucket closes when the next parameter does not fit, so two neighbours hold more
  // than bucket_floats together: m buckets hold more than (m - 1) / 2 * bucket_floats,
  // and this floor keeps m below kMaxBuckets whatever the parameters' sizes.
  bucket_floats = std::max(bucket_floats, 2 * total / (kMaxBuckets - 1) + 1);
  bucket_of_.resize(params_.size());
  slot_of_.resize(params_.size());
  for (size_t k = params_.size(); k-- > 0;) {
    const size_t n = static_cast<size_t>(params_[k].numel());
    if (buckets_.empty() || (buckets_.back().floats > 0 && buckets_.back().floats + n > bucket_floats))
      buckets_.emplace_back();
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.params.size();
    b.params.push_back(k);
    b.offsets.push_back(b.floats);
    b.floats += n;
  }
  SHAMN_CHECK(buckets_.size() <= kMaxBuckets, buckets_.size(), " gradient buckets, more than the ",
              kMaxBuckets, " tags of the exchange");
  packed_.resize(params_.size());
}

std::optional<size_t> GradientExchange::index_of(const Var& v) const {
  auto it = index_.find(v.impl());
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void GradientExchange::sum_over_ranks(Communicator& comm) {
  if (comm.size() == 1) {
    bytes_ = 0;
    return;
  }
  {
    // Time spent here is the slowest rank's lead, not transfer: kept apart in --profile.
    const ProfileScope waiting("wait_for_ranks", ProfileCategory::comm);
    comm.check_in("the gradient exchange");
  }
  begin(comm);
  for (size_t i = params_.size(); i-- > 0;) ready(i);
  finish();
}

void GradientExchange::begin(Communicator& comm) {
  SHAMN_CHECK(comm_ == nullptr, "GradientExchange::begin twice without finish");
  comm_ = &comm;
  bytes_ = 0;
  std::fill(packed_.begin(), packed_.end(), 0);
  for (Bucket& b : buckets_) {
    b.waiting = b.params.size();
    b.data.resize(b.floats + b.params.size());
  }
}

void GradientExchange::ready(size_t index) {
  SHAMN_CHECK(comm_ != nullptr, "GradientExchange::ready outside begin/finish");
  if (packed_[index]) return;
  pack(index);
  Bucket& b = buckets_[bucket_of_[index]];
  if (--b.waiting == 0) {
    bytes_ += static_cast<int64_t>(b.data.size() * sizeof(float));
    b.sum = comm_->start_sum_tree(b.data.data(), b.data.size(), static_cast<int>(bucket_of_[index]));
  }
}

void GradientExchange::pack(size_t index) {
  packed_[index] = 1;
  Bucket& b = buckets_[bucket_of_[index]];
  const size_t slot = slot_of_[index];
  const Tensor& g = params_[index].grad();
  float* at = b.data.data() + b.offsets[slot];
  const size_t n = static_cast<size_t>(params_[index].numel());
  if (g.defined())
    std::memcpy(at, g.data<float>(), n * sizeof(float));
  else
    std::memset(at, 0, n * sizeof(float));
  b.data[b.floats + slot] = g.defined() ? 1.0f : 0.0f;
}

void GradientExchange::poll() {
  for (Bucket& b : buckets_)
    if (b.sum) b.sum->progress();
}

void GradientExchange::finish() {
  SHAMN_CHECK(comm_ != nullptr, "GradientExchange::finish without begin");
  for (size_t i = params_.size(); i-- > 0;) ready(i);
  const ProfileScope summing("sum_gradients", ProfileCategory::comm);
  for (Bucket& b : buckets_) {
    b.sum->wait();
    b.sum.reset();
    unpack(b);
  }
  comm_ = nullptr;
  // Every rank has now sent its part of every bucket, so a fault here strikes
  // when all of them have reached this step's exchange (rank 0 past its last
  // checkpoint): a place where killing a rank is deterministic.
  fault::pass("train.exchange");
}

void GradientExchange::unpack(Bucket& b) {
  for (size_t slot = 0; slot < b.params.size(); ++slot) {
    if (b.data[b.floats + slot] == 0.0f) continue;  // no rank had a gradient
    Var& p = params_[b.params[slot]];
    if (!p.grad().defined()) p.set_grad(Tensor::empty(p.shape(), DType::f32));
    std::memcpy(p.grad().data<float>(), b.data.data() + b.offsets[slot],
                static_cast<size_t>(p.numel()) * sizeof(float));
  }
}

}  // namespace shamn
