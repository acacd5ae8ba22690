#include "cli/completion_request.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

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

namespace {

// One prompt's text, encoded, within the limit.
std::vector<int32_t> encode_prompt(const std::string& text, const Tokenizer& tokenizer,
                                   const ServeLimits& limits, const std::string& which) {
  // A prompt too long by its bytes alone is refused before it is encoded: a 1 MiB
  // body would otherwise cost its tokens and the encoder's scratch (about 11 MB) first.
  const int64_t at_least = ceil_div(static_cast<int64_t>(text.size()), tokenizer.longest_token_bytes());
  if (at_least > limits.max_prompt_tokens)
    throw RequestError(which + " is at least " + std::to_string(at_least) + " tokens (" +
                       std::to_string(text.size()) + " bytes); this server takes at most " +
                       std::to_string(limits.max_prompt_tokens));
  const std::vector<uint32_t> ids = tokenizer.encode(text);
  if (ids.empty()) throw RequestError(which + " is empty: the model needs at least one token to continue");
  if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
    throw RequestError(which + " is " + std::to_string(ids.size()) + " tokens; this server takes at most " +
                       std::to_string(limits.max_prompt_tokens));
  return {ids.begin(), ids.end()};
}

// One prompt given as token ids, each checked against the model's vocabulary.
std::vector<int32_t> prompt_ids(const json& ids, int64_t vocab_size, const ServeLimits& limits,
                                const std::string& which) {
  if (ids.empty()) throw RequestError(which + " is empty: the model needs at least one token to continue");
  if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
    throw RequestError(which + " is " + std::to_string(ids.size()) + " tokens; this server takes at most " +
                       std::to_string(limits.max_prompt_tokens));
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const json& id : ids) {
    // JSON text gives a non-negative integer as unsigned: anything else is not an id.
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= static_cast<uint64_t>(vocab_size))
      throw RequestError(which + " holds " + id.dump() + ", not a token id in [0, " +
                         std::to_string(vocab_size) + ")");
    out.push_back(static_cast<int32_t>(id.get<uint64_t>()));
  }
  return out;
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int32_t, float>> logit_bias(const json& body, int64_t vocab_size) {
  const json* b = field(body, "logit_bias");
  if (!b) return {};
  if (!b->is_object()) throw RequestError("logit_bias must be an object of token ids to biases");
  if (b->size() > kMaxLogitBias)
    throw RequestError("logit_bias holds " + std::to_string(b->size()) + " tokens; at most " +
                       std::to_string(kMaxLogitBias));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : b->items()) {
    // Decimal ids as OpenAI writes them: no sign, no leading zero (which would
    // let "05" and "5" name one token twice).
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos &&
                        (key[0] != '0' || key.size() == 1);
    if (!digits || std::stoll(key) >= vocab_size)
      throw RequestError("logit_bias names '" + key + "', not a token id in [0, " +
                         std::to_string(vocab_size) + ")");
    if (!value.is_number() || !(std::abs(value.get<double>()) <= kLogitBiasLimit))
      throw RequestError("logit_bias's value for token " + key + " must be a number in [-100, 100], got " +
                         value.dump());
    out.emplace_back(static_cast<int32_t>(std::stoll(key)), value.get<float>());
  }
  return out;
}

// OpenAI's prompt: a string, a list of token ids, or a list of either (one choice each).
std::vector<std::vector<int32_t>> prompts(const json& body, const Tokenizer& tokenizer, int64_t vocab_size,
                                          const ServeLimits& limits) {
  const json* prompt = field(body, "prompt");
  if (!prompt) throw RequestError("prompt is required");
  const char* kForms =
      "prompt must be a string, a list of token ids, or a list of strings or of lists of token ids";
  if (prompt->is_string())
    return {encode_prompt(prompt->get_ref<const std::string&>(), tokenizer, limits, "prompt")};
  if (!prompt->is_array() || prompt->empty()) throw RequestError(kForms);
  if ((*prompt)[0].is_number()) return {prompt_ids(*prompt, vocab_size, limits, "prompt")};
  if (static_cast<int64_t>(prompt->size()) > limits.max_prompts)
    throw RequestError("prompt holds " + std::to_string(prompt->size()) +
                       " prompts; this server takes at most " + std::to_string(limits.max_prompts) +
                       " a request");
  std::vector<std::vector<int32_t>> out;
  for (const json& p : *prompt) {
    const std::string which = "prompt " + std::to_string(out.size());
    if (p.is_string())
      out.push_back(encode_prompt(p.get_ref<const std::string&>(), tokenizer, limits, which));
    else if (p.is_array())
      out.push_back(prompt_ids(p, vocab_size, limits, which));
    else
      throw RequestError(kForms);
  }
  return out;
}

}  // namespace

ParsedCompletion parse_completion_request(const std::string& body, const Tokenizer& tokenizer,
                                          int64_t vocab_size, const ServeLimits& limits) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) throw RequestError("the body is not valid JSON (UTF-8)");
  if (!j.is_object()) throw RequestError("the body must be a JSON object");
  std::vector<std::vector<int32_t>> texts = prompts(j, tokenizer, vocab_size, limits);
  const auto prompts_times = [&](const char* name, int64_t each) {
    const int64_t all = each * static_cast<int64_t>(texts.size());
    if (all > limits.max_prompts)
      throw RequestError(std::string(name) + " " + std::to_string(each) + " of " +
                         std::to_string(texts.size()) + " prompts asks for " + std::to_string(all) +
                         " completions; this server makes at most " + std::to_string(limits.max_prompts) +
                         " a request");
  };
  const int64_t n = integer(j, "n", 1, 1, limits.max_prompts);
  prompts_times("n", n);
  // best_of candidates of each prompt are drawn; the n likeliest are returned.
  const int64_t best_of = integer(j, "best_of", n, n, limits.max_prompts);
  prompts_times("best_of", best_of);
  // Controls this server does not apply are refused, not ignored, except at their
  // no-op values, which some clients (LangChain) send with every request.
  if (const json* s = field(j, "suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    throw RequestError("suffix is not supported");

  ParsedCompletion p;
  CompletionRequest r;
  r.max_tokens = integer(j, "max_tokens", 16, 0, limits.max_tokens);
  r.sampling.temperature = number(j, "temperature", 0.8, 0, 100, false);
  r.sampling.top_k = integer(j, "top_k", 40, 0, INT32_MAX);
  r.sampling.top_p = number(j, "top_p", 0.95, 0, 1, true);
  const json* seed = field(j, "seed");
  r.sampling.seed = seed ? static_cast<uint64_t>(integer(j, "seed", 0, 0, INT64_MAX)) : random_seed();
  r.sampling.frequency_penalty = number(j, "frequency_penalty", 0, -2, 2, false);
  r.sampling.presence_penalty = number(j, "presence_penalty", 0, -2, 2, false);
  r.sampling.logit_bias = logit_bias(j, vocab_size);
  r.stop = stop_strings(j);
  r.time_limit_s = limits.time_limit_s;
  r.logprobs = integer(j, "logprobs", -1, 0, kMaxLogprobs);
  p.logprobs = r.logprobs >= 0;
  p.echo = flag(j, "echo");
  r.echo = p.echo;
  p.n = n;
  p.best_of = best_of;
  r.prompt_logprobs = p.echo && p.logprobs;
  // Candidates are ranked by their tokens' log-probabilities, which need the
  // logprobs entries (k = 0 where the client asked for none; dropped then).
  if (best_of > n) r.logprobs = std::max<int64_t>(r.logprobs, 0);
  p.stream = flag(j, "stream");
  if (p.stream && texts.size() * best_of > 1)
    throw RequestError("stream takes one prompt and n = best_of = 1");
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
  // n completions of each prompt, prompt by prompt; the j-th of a prompt's
  // draws with seed + j, so each is the text generate gives for that seed.
  // What logprobs would return, bounded: each scored token's value and its
  // alternatives (at 64 prompts of 8,192 tokens and logprobs 20, a 317 MB
  // response built on one HTTP thread, 2.4 GB of the server's memory).
  if (r.logprobs >= 0) {
    int64_t scored = 0;
    for (const std::vector<int32_t>& text : texts)
      scored += best_of * (r.max_tokens + (r.prompt_logprobs ? static_cast<int64_t>(text.size()) : 0));
    p.logprob_values = scored * (r.logprobs + 1);
    if (p.logprob_values > limits.max_logprob_values)
      throw RequestError("logprobs " + std::to_string(r.logprobs) + " of " + std::to_string(scored) +
                         " tokens" + (best_of > n ? " (best_of scores every candidate's tokens)" : "") +
                         " would return " + std::to_string(scored * (r.logprobs + 1)) +
                         " values; this server returns at most " + std::to_string(limits.max_logprob_values) +
                         " a request (fewer prompts, best_of, tokens or alternatives)");
  }
  for (std::vector<int32_t>& text : texts)
    for (int64_t c = 0; c < best_of; ++c) {
      p.requests.push_back(r);
      p.requests.back().prompt = text;
      p.requests.back().sampling.seed = r.sampling.seed + static_cast<uint64_t>(c);
    }
  return p;
}

}  // namespace shamn::cli
