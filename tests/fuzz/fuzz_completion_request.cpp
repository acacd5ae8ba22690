// libFuzzer target for the bodies `shamn serve` reads (cli/completion_request.h,
// cli/tokenizer_json.h, cli/adapter_json.h): the input is a POST /v1/completions
// body (and a /tokenize, /detokenize or /v1/load_lora_adapter one).
// It is either read into requests within the server's limits or refused with a
// RequestError; anything else (a crash, another exception, a sanitizer report)
// is a finding. The response writers also get the input's raw bytes as
// generated text and tokens (a token may end inside a UTF-8 character) and must
// still write JSON that reads back.
// Build and run: tests/fuzz/build_and_run.sh completion_request SECONDS.
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/adapter_json.h"
#include "cli/completion_request.h"
#include "cli/completion_response.h"
#include "cli/tokenizer_json.h"
#include "tests/fuzz/fuzz_fail.h"

namespace {

const shamn::Tokenizer& tokenizer() {
  static const shamn::Tokenizer t = [] {
    std::string text;
    for (int i = 0; i < 50; ++i) text += "the cat sat on the mat; \"the dog\" ran 7 times. ";
    return shamn::Tokenizer::train(text, 300);
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  shamn::cli::ServeLimits limits;
  limits.max_tokens = 1000;
  limits.max_prompt_tokens = 64;
  const int64_t vocab = tokenizer().vocab_size() + 4;  // ids past the tokenizer are the model's too
  try {
    const shamn::cli::ParsedCompletion p =
        shamn::cli::parse_completion_request(body, tokenizer(), vocab, limits);
    if (p.requests.empty() || static_cast<int64_t>(p.requests.size()) > limits.max_prompts)
      shamn::fuzz::fail("no prompt, or more than the limit");
    if (p.best_of < p.n || static_cast<int64_t>(p.requests.size()) % p.best_of != 0)
      shamn::fuzz::fail("best_of under n, or candidates not best_of a prompt");
    if (p.best_of > p.n && p.requests.front().logprobs < 0)
      shamn::fuzz::fail("best_of's candidates unscored");
    for (const shamn::CompletionRequest& r : p.requests) {
      if (r.prompt.empty() || static_cast<int64_t>(r.prompt.size()) > limits.max_prompt_tokens)
        shamn::fuzz::fail("an accepted prompt is empty or over the limit");
      for (const int32_t t : r.prompt)
        if (t < 0 || t >= vocab) shamn::fuzz::fail("a prompt token outside the vocabulary");
      if (r.max_tokens < 0 || r.max_tokens > limits.max_tokens) shamn::fuzz::fail("max_tokens out of range");
      if (r.stop.size() > 4) shamn::fuzz::fail("more than 4 stop strings");
      if (r.logprobs < -1 || r.logprobs > shamn::cli::kMaxLogprobs)
        shamn::fuzz::fail("logprobs out of range");
      r.sampling.validate();  // throws InputError, a finding here, if parsing let a bad value through
    }
  } catch (const shamn::cli::RequestError&) {
  }
  try {
    const shamn::cli::AdapterRequest a = shamn::cli::parse_adapter_request(body, true);
    if (a.name.empty() || a.path.empty()) shamn::fuzz::fail("an adapter request without its name or path");
  } catch (const shamn::cli::RequestError&) {
  }
  // The writers get the raw bytes as text and as tokens' names (a token may end
  // inside a UTF-8 character).
  const shamn::cli::CompletionId id{"cmpl-1", 0, "m.shq"};
  shamn::cli::CompletionChoice choice;
  choice.text = body;
  choice.finish = shamn::FinishReason::stop;
  choice.with_logprobs = true;
  for (size_t i = 0; i < size && i < 8; ++i) {
    shamn::TokenLogprob e;
    e.token = data[i];
    e.logprob = i == 0 ? NAN : -static_cast<float>(i);
    e.top = {{data[i], -1.0f}, {static_cast<int32_t>(tokenizer().vocab_size()), -2.0f}};
    choice.logprobs.push_back(e);
  }
  for (const std::string& out :
       {shamn::cli::completion_json(id, {choice}, 3, 4, tokenizer()),
        shamn::cli::completion_chunk_json(id, choice, tokenizer()), shamn::cli::error_json(body, "x"),
        shamn::cli::adapter_status_json(body, true),
        [&] {
          try {
            return shamn::cli::tokenize_json(body, tokenizer(), 64);
          } catch (const shamn::cli::RequestError&) {
            return std::string("{}");
          }
        }(),
        [&] {
          try {
            return shamn::cli::detokenize_json(body, tokenizer(), vocab);
          } catch (const shamn::cli::RequestError&) {
            return std::string("{}");
          }
        }()})
    if (nlohmann::json::parse(out, nullptr, false).is_discarded())
      shamn::fuzz::fail("a response is not JSON");
  return 0;
}
