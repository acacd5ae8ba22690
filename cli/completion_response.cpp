#include "cli/completion_response.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/json_text.h"
#include "core/check.h"

namespace shamn::cli {

namespace {

using ordered = nlohmann::ordered_json;

// A token as OpenAI's logprobs name it: its text, or where its bytes are not
// whole UTF-8 characters, "bytes:\xNN..." (a token past the tokenizer: "<token N>").
std::string token_name(const Tokenizer& tokenizer, int32_t id) {
  if (id >= tokenizer.vocab_size()) return "<token " + std::to_string(id) + ">";
  const std::string& bytes = tokenizer.token_bytes(static_cast<uint32_t>(id));
  Utf8Counter utf8;
  utf8.add(bytes);
  if (utf8.well_formed()) return bytes;
  std::string out = "bytes:";
  for (const char b : bytes) {
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(b));
    out += hex;
  }
  return out;
}

// JSON text of a string that is well-formed UTF-8 (token names are).
void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

// The shortest text that reads back as the same float; NaN: null.
void append_number(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char text[32];
  out.append(text, std::to_chars(text, text + sizeof(text), v).ptr);
}

template <class Each>
void append_array(std::string& out, const std::vector<TokenLogprob>& entries, Each each) {
  out += '[';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ',';
    each(entries[i]);
  }
  out += ']';
}

// OpenAI's legacy logprobs object: tokens, token_logprobs, top_logprobs (a
// token's alternatives, likeliest first, and the token itself, as vLLM and
// OpenAI add it), text_offset. The prompt's first token has no logprob (null).
// Written as text: a JSON tree took about 300 bytes a value (a response of
// 2^20 values, 40 MB of text, peaked at 340 MB).
std::string logprobs_text(const CompletionChoice& c, const Tokenizer& tokenizer) {
  std::string out = "{\"tokens\":";
  append_array(out, c.logprobs,
               [&](const TokenLogprob& e) { append_string(out, token_name(tokenizer, e.token)); });
  out += ",\"token_logprobs\":";
  append_array(out, c.logprobs, [&](const TokenLogprob& e) { append_number(out, e.logprob); });
  out += ",\"top_logprobs\":";
  append_array(out, c.logprobs, [&](const TokenLogprob& e) {
    if (std::isnan(e.logprob)) {
      out += "null";
      return;
    }
    out += '{';
    bool has_token = false;
    for (const auto& [id, logprob] : e.top) {
      if (out.back() != '{') out += ',';
      append_string(out, token_name(tokenizer, id));
      out += ':';
      append_number(out, logprob);
      has_token |= id == e.token;
    }
    if (!has_token) {
      if (out.back() != '{') out += ',';
      append_string(out, token_name(tokenizer, e.token));
      out += ':';
      append_number(out, e.logprob);
    }
    out += '}';
  });
  out += ",\"text_offset\":";
  append_array(out, c.logprobs, [&](const TokenLogprob& e) { out += std::to_string(e.char_offset); });
  out += '}';
  return out;
}

// A choice's JSON text: its logprobs written directly, the rest by the JSON library.
std::string choice_text(const CompletionChoice& c, const Tokenizer& tokenizer) {
  ordered j = {{"index", c.index}, {"text", c.text}, {"finish_reason", nullptr}};
  if (c.finish != FinishReason::none) j["finish_reason"] = finish_reason_name(c.finish);
  std::string out = json_text(j);
  out.pop_back();  // the closing brace
  out += ",\"logprobs\":";
  out += c.with_logprobs ? logprobs_text(c, tokenizer) : "null";
  out += '}';
  return out;
}

ordered response_head(const CompletionId& id) {
  return {{"id", id.id}, {"object", "text_completion"}, {"created", id.created}, {"model", id.model}};
}

ordered usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// The response's text: its head, the choices, and after them `tail` (usage,
// error), each member of an object.
std::string response_text(const CompletionId& id, const std::vector<CompletionChoice>& choices,
                          const Tokenizer& tokenizer, const ordered& tail) {
  std::string out = json_text(response_head(id));
  out.pop_back();
  out += ",\"choices\":[";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += ',';
    out += choice_text(choices[i], tokenizer);
  }
  out += ']';
  for (const auto& [key, value] : tail.items()) {
    out += ',';
    append_string(out, key);
    out += ':';
    out += json_text(value);
  }
  out += '}';
  return out;
}

// The first failed choice's error, beside the choices.
void add_error(ordered& tail, const std::vector<CompletionChoice>& choices) {
  for (const CompletionChoice& c : choices)
    if (!c.error.empty()) {
      tail["error"] = {{"message", c.error}, {"type", "server_error"}};
      return;
    }
}

}  // namespace

std::vector<CompletionChoice> choose_best_of(std::vector<CompletionChoice> candidates, int64_t best_of,
                                             int64_t n) {
  if (best_of == n) return candidates;
  SHAMN_CHECK(best_of > n && n >= 1 && static_cast<int64_t>(candidates.size()) % best_of == 0, "best_of ",
              best_of, " of ", candidates.size(), " candidates, n ", n);
  // The mean log-probability of a generated token; a candidate that did not
  // end by its length or a stop string, or has no token scored, or NaN
  // logits, ranks last.
  const auto score = [](const CompletionChoice& c) {
    double sum = 0;
    int64_t tokens = 0;
    for (const TokenLogprob& e : c.logprobs)
      if (!e.in_prompt) {
        sum += e.logprob;
        ++tokens;
      }
    const bool ended = c.finish == FinishReason::length || c.finish == FinishReason::stop;
    const double mean = tokens > 0 ? sum / static_cast<double>(tokens) : NAN;
    return ended && !std::isnan(mean) ? mean : -INFINITY;
  };
  std::vector<CompletionChoice> chosen;
  for (size_t first = 0; first < candidates.size(); first += static_cast<size_t>(best_of)) {
    std::vector<std::pair<double, size_t>> ranked;  // (score, candidate)
    for (size_t i = first; i < first + static_cast<size_t>(best_of); ++i)
      ranked.emplace_back(score(candidates[i]), i);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int64_t k = 0; k < n; ++k) {
      chosen.push_back(std::move(candidates[ranked[static_cast<size_t>(k)].second]));
      chosen.back().index = static_cast<int64_t>(chosen.size()) - 1;
    }
  }
  return chosen;
}

std::string completion_json(const CompletionId& id, const std::vector<CompletionChoice>& choices,
                            int64_t prompt_tokens, int64_t completion_tokens, const Tokenizer& tokenizer) {
  ordered tail = {{"usage", usage_json(prompt_tokens, completion_tokens)}};
  add_error(tail, choices);
  return response_text(id, choices, tokenizer, tail);
}

std::string completion_chunk_json(const CompletionId& id, const CompletionChoice& choice,
                                  const Tokenizer& tokenizer) {
  ordered tail = ordered::object();
  add_error(tail, {choice});
  return response_text(id, {choice}, tokenizer, tail);
}

std::string usage_chunk_json(const CompletionId& id, int64_t prompt_tokens, int64_t completion_tokens) {
  ordered j = response_head(id);
  j["choices"] = ordered::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return json_text(j);
}

}  // namespace shamn::cli
