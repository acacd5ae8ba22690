#pragma once
// The LoRA adapters of `shamn serve` as JSON: GET /v1/models, and vLLM's
// POST /v1/load_lora_adapter and /v1/unload_lora_adapter.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/request_error.h"

namespace shamn::cli {

// One LoRA adapter a server runs beside its model, as GET /v1/models lists it.
struct ServedAdapter {
  std::string name, file;
  int64_t rank = 0;
  double alpha = 0;
  bool rslora = false;
};
// GET /v1/models: the model, then each adapter as a model whose parent is it
// (the listing vLLM gives its LoRA modules), with its rank, alpha and file.
std::string models_json(const std::string& model, int64_t created,
                        const std::vector<ServedAdapter>& adapters);
// The body of POST /v1/load_lora_adapter or /v1/unload_lora_adapter (vLLM's
// fields): lora_name, and lora_path when loading; a RequestError names the field.
struct AdapterRequest {
  std::string name, path;
};
AdapterRequest parse_adapter_request(const std::string& body, bool loading);
// The answer to a load or unload: {"lora_name": NAME, "status": "loaded" | "unloaded"}.
std::string adapter_status_json(const std::string& name, bool loaded);

}  // namespace shamn::cli
