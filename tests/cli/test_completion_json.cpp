// The completion request's prompt limit: counted exactly where the prompt is
// encoded, and refused by its bytes alone where even its fewest possible tokens
// are too many (so a huge body is never encoded).
#include <catch2/catch.hpp>

#include <string>

#include "cli/completion_json.h"
#include "data/tokenizer.h"

using namespace shamn;
using namespace shamn::cli;

namespace {
std::string body_with_prompt(const std::string& prompt) { return "{\"prompt\": \"" + prompt + "\"}"; }
}  // namespace

TEST_CASE("a prompt over the token limit is refused, by its bytes alone where they settle it",
          "[serve][completion]") {
  // Merges "aa" (256) and "aaaa" (257): the longest token is 4 bytes.
  const Tokenizer tokenizer({{'a', 'a'}, {256, 256}});
  REQUIRE(tokenizer.longest_token_bytes() == 4);
  ServeLimits limits;
  limits.max_prompt_tokens = 10;

  // 40 a's: 10 tokens of "aaaa", at the limit.
  CHECK(parse_completion_request(body_with_prompt(std::string(40, 'a')), tokenizer, limits)
            .request.prompt.size() == 10);
  // 41 bytes could be 11 tokens at the fewest: refused unencoded, saying so.
  CHECK_THROWS_WITH(parse_completion_request(body_with_prompt(std::string(41, 'a')), tokenizer, limits),
                    Catch::Equals("prompt is at least 11 tokens (41 bytes); this server takes at most 10"));
  // 40 bytes that encode to 40 tokens: counted after encoding.
  CHECK_THROWS_WITH(parse_completion_request(body_with_prompt(std::string(40, 'b')), tokenizer, limits),
                    Catch::Equals("prompt is 40 tokens; this server takes at most 10"));
  // The bytes-only tokenizer: one byte a token.
  CHECK(Tokenizer().longest_token_bytes() == 1);
}

TEST_CASE("controls the server does not apply are refused unless at their no-op values",
          "[serve][completion]") {
  const Tokenizer tokenizer;
  const ServeLimits limits;
  const auto parse = [&](const std::string& fields) {
    return parse_completion_request("{\"prompt\": \"a\", " + fields + "}", tokenizer, limits);
  };
  CHECK_NOTHROW(parse(R"("frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "suffix": "")"));
  CHECK_NOTHROW(parse(R"("frequency_penalty": null, "logit_bias": null, "suffix": null)"));
  CHECK_THROWS_WITH(parse(R"("presence_penalty": 0.5)"),
                    Catch::Contains("presence_penalty are not supported"));
  CHECK_THROWS_WITH(parse(R"("frequency_penalty": -2)"), Catch::Contains("frequency_penalty and"));
  CHECK_THROWS_WITH(parse(R"("frequency_penalty": 2.5)"),
                    Catch::Contains("frequency_penalty must lie in [-2.0, 2.0], got 2.5"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"7": -100})"), Catch::Contains("logit_bias is not supported"));
  CHECK_THROWS_WITH(parse(R"("suffix": "end")"), Catch::Contains("suffix is not supported"));

  CHECK_FALSE(parse(R"("stream": true)").stream_usage);
  CHECK(parse(R"("stream": true, "stream_options": {"include_usage": true})").stream_usage);
  CHECK_FALSE(parse(R"("stream": true, "stream_options": {})").stream_usage);
  CHECK_THROWS_WITH(parse(R"("stream_options": {"include_usage": true})"),
                    Catch::Contains("stream_options is only for stream: true"));
  CHECK_THROWS_WITH(parse(R"("stream": true, "stream_options": [])"),
                    Catch::Contains("stream_options must be an object"));
}
