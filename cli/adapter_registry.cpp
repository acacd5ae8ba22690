#include "cli/adapter_registry.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "infer/shq_file.h"

namespace shamn::cli {

bool plain_adapter_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

void AdapterRegistry::check_name(const std::string& name) const {
  SHAMN_INPUT_CHECK(plain_adapter_name(name), "the adapter name '", name,
                    "' must be 1 to 64 letters, digits, '.', '_' or '-'");
  SHAMN_INPUT_CHECK(name != model_name_, "the adapter name '", name, "' is the model's");
  const std::lock_guard lock(mutex_);
  SHAMN_INPUT_CHECK(!adapters_.count(name), "an adapter named '", name, "' is loaded already");
}

void AdapterRegistry::check_room() const {
  SHAMN_INPUT_CHECK(static_cast<int64_t>(adapters_.size()) < max_adapters_,
                    "this server holds the most adapters it may already (--max-adapters = ", max_adapters_,
                    "); unload one first");
}

void AdapterRegistry::load(const std::string& name, const std::string& file) {
  // The name first: a taken or bad name is refused without reading the file.
  check_name(name);
  {
    const std::lock_guard lock(mutex_);
    check_room();
  }
  // Read and checked outside the lock: requests go on meanwhile (another load
  // may take the name or the last place meanwhile: checked again below).
  auto adapter = std::make_shared<const LoraAdapter>(ShqFile::open(file, "adapter file"), base_);
  const std::lock_guard lock(mutex_);
  SHAMN_INPUT_CHECK(!adapters_.count(name), "an adapter named '", name, "' is loaded already");
  check_room();
  adapters_.emplace(name, std::move(adapter));
  std::erase(unloaded_, name);  // its counter goes on
}

bool AdapterRegistry::unload(const std::string& name) {
  std::shared_ptr<const LoraAdapter> gone;  // released after the lock: unmapping waits for no lookup
  {
    const std::lock_guard lock(mutex_);
    const auto it = adapters_.find(name);
    if (it == adapters_.end()) return false;
    gone = std::move(it->second);
    adapters_.erase(it);
    if (requests_.count(name)) keep_unloaded_counter(name);
  }
  return true;
}

void AdapterRegistry::keep_unloaded_counter(const std::string& name) {
  unloaded_.push_back(name);
  if (static_cast<int64_t>(unloaded_.size()) <= max_adapters_) return;
  const auto oldest = requests_.find(unloaded_.front());
  requests_[kOtherAdapters] += oldest->second;
  requests_.erase(oldest);
  unloaded_.erase(unloaded_.begin());
}

std::shared_ptr<const LoraAdapter> AdapterRegistry::find(const std::string& name) const {
  const std::lock_guard lock(mutex_);
  const auto it = adapters_.find(name);
  return it == adapters_.end() ? nullptr : it->second;
}

std::vector<ServedAdapter> AdapterRegistry::list() const {
  const std::lock_guard lock(mutex_);
  std::vector<ServedAdapter> out;
  for (const auto& [name, a] : adapters_)
    out.push_back({name, a->path(), a->rank(), a->alpha(), a->rslora()});
  return out;
}

std::string AdapterRegistry::names() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& entry : adapters_) out += (out.empty() ? "" : ", ") + entry.first;
  return out.empty() ? "none" : out;
}

void AdapterRegistry::count_request(const std::string& name) {
  const std::lock_guard lock(mutex_);
  const bool new_series = !requests_.count(name);
  ++requests_[name];
  // Unloaded between the request's lookup and this count: its series joins the
  // unloaded ones' (or none would ever fold it into kOtherAdapters).
  if (new_series && !adapters_.count(name)) keep_unloaded_counter(name);
}

std::map<std::string, int64_t> AdapterRegistry::request_counts() const {
  const std::lock_guard lock(mutex_);
  std::map<std::string, int64_t> out = requests_;
  for (const auto& entry : adapters_) out.emplace(entry.first, 0);  // loaded, no request yet: 0
  return out;
}

}  // namespace shamn::cli
