#include "cli/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "cli/json_text.h"
#include "cli/request_error.h"
#include "core/ceil_div.h"

namespace shamn::cli {

namespace {

using nlohmann::ordered_json;

nlohmann::json object_body(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) throw RequestError("the body is not valid JSON (UTF-8)");
  if (!j.is_object()) throw RequestError("the body must be a JSON object");
  return j;
}

}  // namespace

std::string tokenize_json(const std::string& body, const Tokenizer& tokenizer, int64_t max_model_len) {
  const nlohmann::json j = object_body(body);
  const auto prompt = j.find("prompt");
  if (prompt == j.end() || !prompt->is_string()) throw RequestError("prompt is required: a string");
  if (const auto special = j.find("add_special_tokens"); special != j.end() && !special->is_boolean())
    throw RequestError("add_special_tokens must be true or false");
  // Refused unencoded where even its fewest tokens are past the model's length,
  // as completions' prompts are (a 1 MiB prompt took 68 MB and 0.3 s to encode).
  const std::string& text = prompt->get_ref<const std::string&>();
  const auto at_least = ceil_div(static_cast<int64_t>(text.size()), tokenizer.longest_token_bytes());
  if (at_least > max_model_len)
    throw RequestError("prompt is at least " + std::to_string(at_least) + " tokens (" +
                       std::to_string(text.size()) + " bytes); this server takes at most " +
                       std::to_string(max_model_len));
  const std::vector<uint32_t> ids = tokenizer.encode(text);
  return json_text(ordered_json{{"count", ids.size()}, {"max_model_len", max_model_len}, {"tokens", ids}});
}

std::string detokenize_json(const std::string& body, const Tokenizer& tokenizer, int64_t vocab_size) {
  const nlohmann::json j = object_body(body);
  const auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) throw RequestError("tokens is required: a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const nlohmann::json& id : *tokens) {
    const bool in_range = id.is_number_unsigned() && id.get<uint64_t>() < static_cast<uint64_t>(vocab_size);
    if (!in_range)
      throw RequestError("tokens holds " + id.dump() + ", not a token id in [0, " +
                         std::to_string(vocab_size) + ")");
    ids.push_back(static_cast<int32_t>(id.get<uint64_t>()));
  }
  return json_text(ordered_json{{"prompt", tokenizer.model_text(ids)}});
}

std::string tokenizer_info_json(const Tokenizer& tokenizer, int64_t vocab_size, int64_t max_model_len) {
  return json_text(ordered_json{{"tokenizer_class", "shamn byte-level BPE"},
                                {"vocab_size", vocab_size},
                                {"tokenizer_vocab_size", tokenizer.vocab_size()},
                                {"model_max_length", max_model_len},
                                {"eos_token", nullptr},
                                {"bos_token", nullptr},
                                {"pad_token", nullptr},
                                {"unk_token", nullptr}});
}

}  // namespace shamn::cli
