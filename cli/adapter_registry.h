#pragma once
// The LoRA adapters `shamn serve` runs beside its model, by name: loaded at
// start (--adapter) or while it serves (POST /v1/load_lora_adapter), and
// unloaded by name. A request holds its adapter while it runs, so unloading
// one that running requests use lets them finish with it; the adapter's file is
// let go when the last of them ends.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cli/adapter_json.h"
#include "infer/infer_model.h"
#include "infer/lora_adapter.h"

namespace shamn::cli {

// 1 to 64 letters, digits, '.', '_' or '-': names go into JSON and Prometheus
// labels as they are.
bool plain_adapter_name(const std::string& name);

class AdapterRegistry {
 public:
  // model_name: what requests call the base ("model"), which no adapter may take.
  // At most max_adapters are loaded at once (each holds its packed factors and
  // a mapping: clients that may load must not grow the server without bound).
  AdapterRegistry(const InferModel& base, std::string model_name, int64_t max_adapters = kDefaultMaxAdapters)
      : base_(base), model_name_(std::move(model_name)), max_adapters_(max_adapters) {}
  static constexpr int64_t kDefaultMaxAdapters = 64;

  // Loads `file` as `name`. An InputError says why not: a name that is not
  // plain, is taken or is the model's, max_adapters loaded already, a file that
  // is no adapter of this base (nothing changes then).
  void load(const std::string& name, const std::string& file);
  // The name checks of load alone (the file is not read): an InputError says
  // why `name` cannot be loaded now.
  void check_name(const std::string& name) const;
  // Whether there was an adapter of that name to unload. Its last holder frees
  // it (this call, outside the lock, when no request runs with it).
  bool unload(const std::string& name);
  // The adapter called `name`, alive while the pointer is held; null if none is.
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;
  std::vector<ServedAdapter> list() const;  // by name
  std::string names() const;                // "a, b", or "none"

  // Accepted requests by adapter name, unloaded adapters' included (Prometheus
  // counters do not go back): the max_adapters unloaded last by name, those
  // unloaded before them summed under kOtherAdapters, so that clients cycling
  // through new names do not grow the server (and /metrics) without bound.
  void count_request(const std::string& name);
  std::map<std::string, int64_t> request_counts() const;
  static constexpr const char* kOtherAdapters = "(other)";  // no adapter's name: not plain

 private:
  void check_room() const;  // with mutex_ held: a place for one more adapter
  // With mutex_ held: `name` (unloaded, with a counter) joins unloaded_, whose
  // oldest beyond max_adapters is summed into kOtherAdapters.
  void keep_unloaded_counter(const std::string& name);

  const InferModel& base_;
  const std::string model_name_;
  const int64_t max_adapters_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> adapters_;
  std::map<std::string, int64_t> requests_;
  std::vector<std::string> unloaded_;  // unloaded names with a counter of their own, oldest first
};

}  // namespace shamn::cli
