#pragma once
// The OpenAI-style text completion API (POST /v1/completions, GET /v1/models)
// as JSON: the request body read into a CompletionRequest, and the responses
// written back.
// Anything a client can send is either read or refused with a RequestError
// whose message names the field; nothing here trusts the body.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/completion_scheduler.h"

namespace shamn::cli {

// A body the server answers with HTTP 400.
class RequestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ServeLimits {
  int64_t max_tokens = 4096;  // the largest max_tokens a request may ask for
  int64_t max_prompt_tokens = 8192;
  double time_limit_s = 600;  // every request's limit (0 = none)
  int64_t max_prompts = 64;   // completions in one request (prompts times n)
  // logprobs' values in one response: (tokens scored) x (alternatives + 1).
  int64_t max_logprob_values = int64_t{1} << 20;
};

// The most alternatives `logprobs` may ask for (vLLM's default limit; OpenAI's is 5).
constexpr int64_t kMaxLogprobs = 20;
// The most tokens one logit_bias may name.
constexpr size_t kMaxLogitBias = 1024;

struct ParsedCompletion {
  // n a prompt, prompt by prompt, in the order given: the choices' indices.
  std::vector<CompletionRequest> requests;
  bool echo = false;  // each choice's text starts with its prompt's
  int64_t n = 1;      // choices of each prompt
  bool stream = false;
  bool stream_usage = false;  // stream_options.include_usage: a last event with the usage alone
  std::string adapter;        // the LoRA adapter the request names ("": the base); the server resolves it
  std::string model;          // the request's model field ("" when absent): an adapter's name picks it
};

// Fields: prompt (required: a string, a list of token ids, or a list of up to
// limits.max_prompts of either, not with stream), n (1: completions of each
// prompt, the j-th drawn with seed + j; at most limits.max_prompts in all; not
// with stream), best_of (n; no other value), max_tokens
// (16; 0 with echo scores the prompt alone), temperature (0.8), top_k (40),
// top_p (0.95), seed (random when absent), frequency_penalty and
// presence_penalty (0; in [-2, 2]), logit_bias ({"token id": bias in [-100,
// 100]}, up to kMaxLogitBias), stop (a string or up to 4), logprobs (absent:
// none; k in [0, kMaxLogprobs]: each token's log-probability and the k
// likeliest alternatives), echo (false: the text starts with the prompt's, and
// with logprobs the prompt's tokens are scored too), stream (false), adapter (a
// name, 1-64 characters; absent or null: the base), model (a string; the server
// takes the model file's name or an adapter's, as vLLM does, and refuses
// others), stream_options.include_usage (false; with stream only); suffix only
// empty (refused otherwise: an accepted field must take effect). The sampling defaults are `shamn
// generate`'s. Token ids must lie below vocab_size, the model's vocabulary. Fields that do not change the
// text (user, ...) are ignored.
ParsedCompletion parse_completion_request(const std::string& body, const Tokenizer& tokenizer,
                                          int64_t vocab_size, const ServeLimits& limits);

// What identifies one completion in its responses.
struct CompletionId {
  std::string id;       // "cmpl-<n>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One choice of a response, or what one server-sent event adds to it.
struct CompletionChoice {
  int64_t index = 0;
  std::string text;  // with echo, the prompt's text first (in the first event, where streamed)
  FinishReason finish = FinishReason::none;
  bool with_logprobs = false;          // the request asked for logprobs ("logprobs": null otherwise)
  std::vector<TokenLogprob> logprobs;  // the prompt's (with echo), then the generated tokens'
  // With finish error: why. The response then carries {"error": {"message",
  // "type": "server_error"}} beside its choices (OpenAI's clients raise it).
  std::string error;
};
// The text of token ids as the prompt gives them (ids past the tokenizer: none).
std::string prompt_text(const std::vector<int32_t>& ids, const Tokenizer& tokenizer);
// The whole response of a non-streaming request; the tokenizer names the
// logprobs' tokens (their bytes, or "bytes:\xNN..." where not UTF-8).
std::string completion_json(const CompletionId& id, const std::vector<CompletionChoice>& choices,
                            int64_t prompt_tokens, int64_t completion_tokens, const Tokenizer& tokenizer);
// One server-sent event's data: a piece of text, and the finish reason on the last.
std::string completion_chunk_json(const CompletionId& id, const CompletionChoice& choice,
                                  const Tokenizer& tokenizer);
// The event that stream_options.include_usage adds before "[DONE]": no choices, the usage.
std::string usage_chunk_json(const CompletionId& id, int64_t prompt_tokens, int64_t completion_tokens);
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
// {"error": {"message": ..., "type": ...}}
std::string error_json(const std::string& message, const std::string& type);

}  // namespace shamn::cli
