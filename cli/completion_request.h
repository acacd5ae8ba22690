#pragma once
// The body of an OpenAI-style text completion (POST /v1/completions) read into
// CompletionRequests. Anything a client can send is either read or refused
// with a RequestError whose message names the field; nothing here trusts the body.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/request_error.h"
#include "data/tokenizer.h"
#include "infer/completion_scheduler.h"

namespace shamn::cli {

struct ServeLimits {
  int64_t max_tokens = 4096;  // the largest max_tokens a request may ask for
  int64_t max_prompt_tokens = 8192;
  double time_limit_s = 600;  // every request's limit (0 = none)
  int64_t max_prompts = 64;   // completions in one request (prompts times n)
  // logprobs' values in one response: (tokens scored) x (alternatives + 1).
  int64_t max_logprob_values = int64_t{1} << 20;
  // The same over every request being answered at once (each counted at its
  // most; about 100 bytes a value at a response's peak): what bounds the
  // server's memory for them. More wait (429).
  int64_t max_logprob_values_in_flight = int64_t{1} << 24;
};

// The most alternatives `logprobs` may ask for (vLLM's default limit; OpenAI's is 5).
constexpr int64_t kMaxLogprobs = 20;
// The most tokens one logit_bias may name.
constexpr size_t kMaxLogitBias = 1024;

struct ParsedCompletion {
  // best_of a prompt, prompt by prompt, in the order given (with best_of = n:
  // the choices' indices).
  std::vector<CompletionRequest> requests;
  bool echo = false;           // each choice's text starts with its prompt's
  int64_t n = 1;               // choices of each prompt
  int64_t best_of = 1;         // candidates drawn for each prompt (>= n): the n likeliest are returned
  bool logprobs = false;       // the response shows logprobs (best_of > n asks for them in any case)
  int64_t logprob_values = 0;  // the most logprobs' values the response can hold (0: none asked)
  bool stream = false;
  bool stream_usage = false;  // stream_options.include_usage: a last event with the usage alone
  std::string adapter;        // the LoRA adapter the request names ("": the base); the server resolves it
  std::string model;          // the request's model field ("" when absent): an adapter's name picks it
};

// Fields: prompt (required: a string, a list of token ids, or a list of up to
// limits.max_prompts of either, not with stream), n (1: completions of each
// prompt, the j-th drawn with seed + j; at most limits.max_prompts in all; not
// with stream), best_of (n: candidates of each prompt, the j-th drawn with seed
// + j, of which choose_best_of returns n; at most limits.max_prompts in all;
// not with stream), max_tokens
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

}  // namespace shamn::cli
