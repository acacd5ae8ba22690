#include "cli/completion_json.h"

#include <random>

#include <nlohmann/json.hpp>

#include "cli/json_text.h"
#include "core/ceil_div.h"

namespace shamn::cli {

namespace {

using nlohmann::json;

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw RequestError(std::string(name) + " must be an integer");
  // JSON text gives a non-negative integer as unsigned, which may exceed int64.
  const bool in_range = v->is_number_unsigned() ? v->get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                                      static_cast<int64_t>(v->get<uint64_t>()) >= lo
                                                : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!in_range)
    throw RequestError(std::string(name) + " must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "], got " + v->dump());
  return v->get<int64_t>();
}

double number(const json& body, const char* name, double fallback, double lo, double hi, bool open_lo) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw RequestError(std::string(name) + " must be a number");
  const double x = v->get<double>();
  if (!(open_lo ? x > lo : x >= lo) || !(x <= hi))
    throw RequestError(std::string(name) + " must lie in " + (open_lo ? "(" : "[") + json(lo).dump() + ", " +
                       json(hi).dump() + "], got " + v->dump());
  return x;
}

bool flag(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return false;
  if (!v->is_boolean()) throw RequestError(std::string(name) + " must be true or false");
  return v->get<bool>();
}

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array() && v->size() <= 4) {
    for (const json& s : *v) {
      if (!s.is_string()) throw RequestError("stop must be a string or an array of up to 4 strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw RequestError("stop must be a string or an array of up to 4 strings");
  }
  for (const std::string& s : out)
    if (s.empty() || s.size() > 256) throw RequestError("each stop string must hold 1 to 256 bytes");
  return out;
}

uint64_t random_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

}  // namespace

ParsedCompletion parse_completion_request(const std::string& body, const Tokenizer& tokenizer,
                                          const ServeLimits& limits) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) throw RequestError("the body is not valid JSON (UTF-8)");
  if (!j.is_object()) throw RequestError("the body must be a JSON object");
  const json* prompt = field(j, "prompt");
  if (!prompt) throw RequestError("prompt is required");
  if (!prompt->is_string()) throw RequestError("prompt must be a string");
  const std::string& text = prompt->get_ref<const std::string&>();
  // A prompt too long by its bytes alone is refused before it is encoded: a 1 MiB
  // body would otherwise cost its tokens and the encoder's scratch (about 11 MB) first.
  const int64_t at_least = ceil_div(static_cast<int64_t>(text.size()), tokenizer.longest_token_bytes());
  if (at_least > limits.max_prompt_tokens)
    throw RequestError("prompt is at least " + std::to_string(at_least) + " tokens (" +
                       std::to_string(text.size()) + " bytes); this server takes at most " +
                       std::to_string(limits.max_prompt_tokens));
  const std::vector<uint32_t> ids = tokenizer.encode(text);
  if (ids.empty()) throw RequestError("prompt is empty: the model needs at least one token to continue");
  if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
    throw RequestError("prompt is " + std::to_string(ids.size()) + " tokens; this server takes at most " +
                       std::to_string(limits.max_prompt_tokens));
  if (integer(j, "n", 1, 1, 1) != 1 || integer(j, "best_of", 1, 1, 1) != 1)
    throw RequestError("n and best_of must be 1");
  if (flag(j, "echo")) throw RequestError("echo is not supported");
  if (field(j, "logprobs")) throw RequestError("logprobs is not supported");
  // Controls this server does not apply are refused, not ignored, except at their
  // no-op values, which some clients (LangChain) send with every request.
  if (number(j, "frequency_penalty", 0, -2, 2, false) != 0 ||
      number(j, "presence_penalty", 0, -2, 2, false) != 0)
    throw RequestError("frequency_penalty and presence_penalty are not supported (only 0)");
  if (const json* b = field(j, "logit_bias"); b && !(b->is_object() && b->empty()))
    throw RequestError("logit_bias is not supported (only {})");
  if (const json* s = field(j, "suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    throw RequestError("suffix is not supported");

  ParsedCompletion p;
  CompletionRequest& r = p.request;
  r.prompt.assign(ids.begin(), ids.end());
  r.max_tokens = integer(j, "max_tokens", 16, 0, limits.max_tokens);
  r.sampling.temperature = number(j, "temperature", 0.8, 0, 100, false);
  r.sampling.top_k = integer(j, "top_k", 40, 0, INT32_MAX);
  r.sampling.top_p = number(j, "top_p", 0.95, 0, 1, true);
  const json* seed = field(j, "seed");
  r.sampling.seed = seed ? static_cast<uint64_t>(integer(j, "seed", 0, 0, INT64_MAX)) : random_seed();
  r.stop = stop_strings(j);
  r.time_limit_s = limits.time_limit_s;
  p.stream = flag(j, "stream");
  if (const json* o = field(j, "stream_options")) {
    if (!p.stream) throw RequestError("stream_options is only for stream: true");
    if (!o->is_object()) throw RequestError("stream_options must be an object");
    p.stream_usage = flag(*o, "include_usage");
  }
  if (const json* a = field(j, "adapter"); a && !a->is_null()) {
    if (!a->is_string() || a->get<std::string>().empty() || a->get<std::string>().size() > 64)
      throw RequestError(
          "adapter must be the name of one of the server's LoRA adapters (1 to 64 characters)");
    p.adapter = a->get<std::string>();
  }
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) throw RequestError("model must be a string");
    p.model = m->get<std::string>();
  }
  return p;
}

std::string completion_json(const CompletionId& id, const std::string& text, FinishReason finish,
                            int64_t prompt_tokens, int64_t completion_tokens) {
  json choice = {
      {"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason_name(finish)}};
  json j = {{"id", id.id},
            {"object", "text_completion"},
            {"created", id.created},
            {"model", id.model},
            {"choices", json::array({choice})},
            {"usage",
             {{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}}}};
  return json_text(j);
}

std::string completion_chunk_json(const CompletionId& id, const std::string& text, FinishReason finish) {
  json choice = {{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (finish != FinishReason::none) choice["finish_reason"] = finish_reason_name(finish);
  const json j = {{"id", id.id},
                  {"object", "text_completion"},
                  {"created", id.created},
                  {"model", id.model},
                  {"choices", json::array({choice})}};
  return json_text(j);
}

std::string usage_chunk_json(const CompletionId& id, int64_t prompt_tokens, int64_t completion_tokens) {
  const json j = {{"id", id.id},
                  {"object", "text_completion"},
                  {"created", id.created},
                  {"model", id.model},
                  {"choices", json::array()},
                  {"usage",
                   {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}}}};
  return json_text(j);
}

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
    const json* v = field(j, name);
    if (!v || !v->is_string() || v->get<std::string>().empty())
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

std::string error_json(const std::string& message, const std::string& type) {
  return json_text(json{{"error", {{"message", message}, {"type", type}}}});
}

}  // namespace shamn::cli
