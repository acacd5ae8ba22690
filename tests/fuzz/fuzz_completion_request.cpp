// libFuzzer target for the bodies `shamn serve` reads (cli/completion_json.h):
// the input is a POST /v1/completions body. It is either read into a request
// within the server's limits or refused with a RequestError; anything else (a
// crash, another exception, a sanitizer report) is a finding. The response
// writers also get the input's raw bytes as generated text (a token may end
// inside a UTF-8 character) and must still write JSON that reads back.
// Build and run: tests/fuzz/build_and_run.sh completion_request SECONDS.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/completion_json.h"
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
  try {
    const shamn::cli::ParsedCompletion p = shamn::cli::parse_completion_request(body, tokenizer(), limits);
    const shamn::CompletionRequest& r = p.request;
    if (r.prompt.empty() || static_cast<int64_t>(r.prompt.size()) > limits.max_prompt_tokens)
      shamn::fuzz::fail("an accepted prompt is empty or over the limit");
    for (const int32_t t : r.prompt)
      if (t < 0 || t >= tokenizer().vocab_size()) shamn::fuzz::fail("a prompt token outside the tokenizer");
    if (r.max_tokens < 0 || r.max_tokens > limits.max_tokens) shamn::fuzz::fail("max_tokens out of range");
    if (r.stop.size() > 4) shamn::fuzz::fail("more than 4 stop strings");
    r.sampling.validate();  // throws InputError, a finding here, if parsing let a bad value through
  } catch (const shamn::cli::RequestError&) {
  }
  const shamn::cli::CompletionId id{"cmpl-1", 0, "m.shq"};
  for (const std::string& out : {shamn::cli::completion_json(id, body, shamn::FinishReason::stop, 3, 4),
                                 shamn::cli::completion_chunk_json(id, body, shamn::FinishReason::none),
                                 shamn::cli::error_json(body, "x")})
    if (nlohmann::json::parse(out, nullptr, false).is_discarded())
      shamn::fuzz::fail("a response is not JSON");
  return 0;
}
