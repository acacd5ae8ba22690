#pragma once
// The responses of an OpenAI-style text completion (POST /v1/completions):
// the whole answer, or its server-sent events, with OpenAI's logprobs object.
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/completion_scheduler.h"

namespace shamn::cli {

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
// OpenAI's best_of: of each prompt's best_of candidates (consecutive), the n
// with the highest mean log-probability a generated token (their logprobs
// entries; OpenAI's rule, where vLLM sums them), likeliest first, earlier
// first on ties. Candidates that ended otherwise than by length or a stop
// string (a time limit, an error), or with no token scored, rank last. The
// choices are indexed anew. With best_of = n, the candidates as they are.
std::vector<CompletionChoice> choose_best_of(std::vector<CompletionChoice> candidates, int64_t best_of,
                                             int64_t n);
// The whole response of a non-streaming request; the tokenizer names the
// logprobs' tokens (their bytes, or "bytes:\xNN..." where not UTF-8).
std::string completion_json(const CompletionId& id, const std::vector<CompletionChoice>& choices,
                            int64_t prompt_tokens, int64_t completion_tokens, const Tokenizer& tokenizer);
// One server-sent event's data: a piece of text, and the finish reason on the last.
std::string completion_chunk_json(const CompletionId& id, const CompletionChoice& choice,
                                  const Tokenizer& tokenizer);
// The event that stream_options.include_usage adds before "[DONE]": no choices, the usage.
std::string usage_chunk_json(const CompletionId& id, int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace shamn::cli
