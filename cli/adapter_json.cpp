#include "cli/adapter_json.h"

#include <nlohmann/json.hpp>

#include "cli/json_text.h"

namespace shamn::cli {

using nlohmann::json;

std::string models_json(const std::string& model, int64_t created,
                        const std::vector<ServedAdapter>& adapters) {
  json data =
      json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "shamn"}}});
  for (const ServedAdapter& a : adapters)
    data.push_back({{"id", a.name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "shamn"},
                    {"parent", model},
                    {"root", a.file},
                    {"lora", {{"rank", a.rank}, {"alpha", a.alpha}, {"rslora", a.rslora}}}});
  return json_text(json{{"object", "list"}, {"data", data}});
}

AdapterRequest parse_adapter_request(const std::string& body, bool loading) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw RequestError("the body must be a JSON object");
  const auto text = [&j](const char* name) {
    const auto v = j.find(name);
    if (v == j.end() || !v->is_string() || v->get<std::string>().empty())
      throw RequestError(std::string(name) + " is required: a non-empty string");
    return v->get<std::string>();
  };
  AdapterRequest r;
  r.name = text("lora_name");
  if (loading) r.path = text("lora_path");
  return r;
}

std::string adapter_status_json(const std::string& name, bool loaded) {
  return json_text(json{{"lora_name", name}, {"status", loaded ? "loaded" : "unloaded"}});
}

}  // namespace shamn::cli
