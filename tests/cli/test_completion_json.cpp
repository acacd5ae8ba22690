// The completion request as the server reads it (the prompt limit counted
// exactly where the prompt is encoded, and refused by its bytes alone where even
// its fewest possible tokens are too many, so a huge body is never encoded; the
// prompt's forms; logprobs and echo), the responses' logprobs, and vLLM's
// tokenizer endpoints.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/adapter_json.h"
#include "cli/completion_request.h"
#include "cli/completion_response.h"
#include "cli/tokenizer_json.h"
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
  CHECK(parse_completion_request(body_with_prompt(std::string(40, 'a')), tokenizer, 258, limits)
            .requests.at(0)
            .prompt.size() == 10);
  // 41 bytes could be 11 tokens at the fewest: refused unencoded, saying so.
  CHECK_THROWS_WITH(parse_completion_request(body_with_prompt(std::string(41, 'a')), tokenizer, 258, limits),
                    Catch::Equals("prompt is at least 11 tokens (41 bytes); this server takes at most 10"));
  // 40 bytes that encode to 40 tokens: counted after encoding.
  CHECK_THROWS_WITH(parse_completion_request(body_with_prompt(std::string(40, 'b')), tokenizer, 258, limits),
                    Catch::Equals("prompt is 40 tokens; this server takes at most 10"));
  // The bytes-only tokenizer: one byte a token.
  CHECK(Tokenizer().longest_token_bytes() == 1);
}

TEST_CASE("penalties and logit_bias are read, suffix refused unless empty", "[serve][completion]") {
  const Tokenizer tokenizer;
  const ServeLimits limits;
  const auto parse = [&](const std::string& fields) {
    return parse_completion_request("{\"prompt\": \"a\", " + fields + "}", tokenizer, 256, limits);
  };
  const auto sampling = [&](const std::string& fields) { return parse(fields).requests.at(0).sampling; };
  CHECK_FALSE(sampling(R"("frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "suffix": "")")
                  .adjusts_logits());
  CHECK_FALSE(sampling(R"("frequency_penalty": null, "logit_bias": null, "suffix": null)").adjusts_logits());
  CHECK(sampling(R"("presence_penalty": 0.5)").presence_penalty == 0.5);
  CHECK(sampling(R"("frequency_penalty": -2)").frequency_penalty == -2);
  CHECK_THROWS_WITH(parse(R"("frequency_penalty": 2.5)"),
                    Catch::Contains("frequency_penalty must lie in [-2.0, 2.0], got 2.5"));
  using Bias = std::vector<std::pair<int32_t, float>>;
  // In the order of the keys as text.
  CHECK(sampling(R"("logit_bias": {"7": -100, "255": 2.5})").logit_bias == Bias{{255, 2.5f}, {7, -100.0f}});
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"256": 1})"),
                    Catch::Equals("logit_bias names '256', not a token id in [0, 256)"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"-1": 1})"), Catch::Contains("logit_bias names '-1'"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"a": 1})"), Catch::Contains("logit_bias names 'a'"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"05": 1, "5": 2})"), Catch::Contains("logit_bias names '05'"));
  CHECK(sampling(R"("logit_bias": {"0": 1})").logit_bias.size() == 1);
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"99999999999": 1})"), Catch::Contains("logit_bias names"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"3": 101})"),
                    Catch::Equals("logit_bias's value for token 3 must be a number in [-100, 100], got 101"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": {"3": "1"})"), Catch::Contains("must be a number"));
  CHECK_THROWS_WITH(parse(R"("logit_bias": [])"), Catch::Contains("logit_bias must be an object"));
  CHECK_THROWS_WITH(parse(R"("suffix": "end")"), Catch::Contains("suffix is not supported"));

  CHECK_FALSE(parse(R"("stream": true)").stream_usage);
  CHECK(parse(R"("stream": true, "stream_options": {"include_usage": true})").stream_usage);
  CHECK_FALSE(parse(R"("stream": true, "stream_options": {})").stream_usage);
  CHECK_THROWS_WITH(parse(R"("stream_options": {"include_usage": true})"),
                    Catch::Contains("stream_options is only for stream: true"));
  CHECK_THROWS_WITH(parse(R"("stream": true, "stream_options": [])"),
                    Catch::Contains("stream_options must be an object"));
}

TEST_CASE("a prompt is a string, token ids, or a list of either, with n choices each",
          "[serve][completion]") {
  const Tokenizer tokenizer({{'a', 'b'}});  // "ab" is 256
  ServeLimits limits;
  limits.max_prompts = 3;
  const auto parse = [&](const std::string& prompt, const std::string& more = "") {
    return parse_completion_request("{\"prompt\": " + prompt + more + "}", tokenizer, 260, limits);
  };
  using Ids = std::vector<int32_t>;
  CHECK(parse(R"("abc")").requests.at(0).prompt == Ids{256, 'c'});
  // Ids past the tokenizer (257-259) are the model's: taken.
  CHECK(parse("[7, 256, 259]").requests.at(0).prompt == Ids{7, 256, 259});
  const ParsedCompletion several = parse(R"(["ab", [1, 2], "c"])", R"(, "max_tokens": 3, "seed": 9)");
  REQUIRE(several.requests.size() == 3);
  CHECK(several.requests[0].prompt == Ids{256});
  CHECK(several.requests[1].prompt == Ids{1, 2});
  CHECK(several.requests[2].prompt == Ids{'c'});
  for (const CompletionRequest& r : several.requests) {
    CHECK(r.max_tokens == 3);
    CHECK(r.sampling.seed == 9);
  }
  CHECK_THROWS_WITH(parse("[7, 260]"), Catch::Equals("prompt holds 260, not a token id in [0, 260)"));
  CHECK_THROWS_WITH(parse("[7, -1]"), Catch::Contains("prompt holds -1, not a token id"));
  CHECK_THROWS_WITH(parse("[7, 1.5]"), Catch::Contains("prompt holds 1.5, not a token id"));
  CHECK_THROWS_WITH(parse(R"(["a", [3, "b"]])"), Catch::Contains("prompt 1 holds \"b\", not a token id"));
  CHECK_THROWS_WITH(parse(R"(["a", []])"), Catch::Contains("prompt 1 is empty"));
  CHECK_THROWS_WITH(parse(R"(["a", ""])"), Catch::Contains("prompt 1 is empty"));
  CHECK_THROWS_WITH(parse("[]"), Catch::Contains("prompt must be a string, a list of token ids"));
  CHECK_THROWS_WITH(parse(R"(["a", 3])"), Catch::Contains("prompt must be a string, a list of token ids"));
  CHECK_THROWS_WITH(parse("{}"), Catch::Contains("prompt must be"));
  CHECK_THROWS_WITH(parse(R"(["a", "b", "c", "d"])"),
                    Catch::Equals("prompt holds 4 prompts; this server takes at most 3 a request"));
  CHECK_THROWS_WITH(parse(R"(["a", "b"])", R"(, "stream": true)"),
                    Catch::Equals("stream takes one prompt and n = best_of = 1"));
  CHECK_THROWS_WITH(parse(R"("a")", R"(, "n": 2, "stream": true)"),
                    Catch::Equals("stream takes one prompt and n = best_of = 1"));
  CHECK_THROWS_WITH(parse(R"("a")", R"(, "best_of": 2, "stream": true)"),
                    Catch::Equals("stream takes one prompt and n = best_of = 1"));
  // n completions of each prompt, prompt by prompt, the j-th with seed + j.
  limits.max_prompts = 4;
  const ParsedCompletion n = parse(R"(["ab", [5]])", R"(, "n": 2, "best_of": 2, "seed": 40)");
  REQUIRE(n.requests.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(n.requests[i].prompt == (i < 2 ? Ids{256} : Ids{5}));
    CHECK(n.requests[i].sampling.seed == 40 + i % 2);
  }
  limits.max_prompts = 3;
  CHECK_THROWS_WITH(
      parse(R"(["a", "b"])", R"(, "n": 2)"),
      Catch::Equals("n 2 of 2 prompts asks for 4 completions; this server makes at most 3 a request"));
  CHECK_THROWS_WITH(parse(R"("a")", R"(, "n": 2, "best_of": 1)"),
                    Catch::Contains("best_of must lie in [2, 3]"));
  CHECK_THROWS_WITH(
      parse(R"(["a", "b"])", R"(, "best_of": 2)"),
      Catch::Equals("best_of 2 of 2 prompts asks for 4 completions; this server makes at most 3 a request"));
  // best_of candidates a prompt, the j-th with seed + j; each scored (logprobs
  // 0 where none were asked, shown only where asked).
  const ParsedCompletion best = parse(R"("ab")", R"(, "n": 1, "best_of": 3, "seed": 7)");
  CHECK(best.n == 1);
  CHECK(best.best_of == 3);
  CHECK_FALSE(best.logprobs);
  REQUIRE(best.requests.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(best.requests[i].sampling.seed == 7 + i);
    CHECK(best.requests[i].logprobs == 0);
  }
  CHECK(best.logprob_values == 3 * 16);
  const ParsedCompletion shown = parse(R"("ab")", R"(, "best_of": 2, "logprobs": 3, "echo": true)");
  CHECK(shown.logprobs);
  CHECK(shown.requests[0].logprobs == 3);
  CHECK(shown.requests[0].prompt_logprobs);
  CHECK_FALSE(best.requests[0].prompt_logprobs);
  CHECK(parse(R"("ab")").requests[0].logprobs == -1);
  CHECK_THROWS_WITH(parse(R"("a")", R"(, "n": 0)"), Catch::Contains("n must lie in [1, 3]"));
  CHECK(parse(R"(["a"])", R"(, "stream": true)").stream);
  limits.max_prompt_tokens = 2;
  CHECK_THROWS_WITH(parse("[1, 2, 3]"), Catch::Equals("prompt is 3 tokens; this server takes at most 2"));
}

TEST_CASE("logprobs and echo are read, and the prompt is scored only with both", "[serve][completion]") {
  const Tokenizer tokenizer;
  const ServeLimits limits;
  const auto parse = [&](const std::string& fields) {
    return parse_completion_request("{\"prompt\": \"a\"" + fields + "}", tokenizer, 256, limits);
  };
  CHECK(parse("").requests.at(0).logprobs == -1);
  CHECK(parse(R"(, "logprobs": null)").requests.at(0).logprobs == -1);
  CHECK(parse(R"(, "logprobs": 0)").requests.at(0).logprobs == 0);
  CHECK(parse(R"(, "logprobs": 20)").requests.at(0).logprobs == 20);
  CHECK_THROWS_WITH(parse(R"(, "logprobs": 21)"), Catch::Equals("logprobs must lie in [0, 20], got 21"));
  CHECK_THROWS_WITH(parse(R"(, "logprobs": true)"), Catch::Equals("logprobs must be an integer"));
  CHECK_FALSE(parse(R"(, "logprobs": 1)").requests.at(0).prompt_logprobs);
  const ParsedCompletion echoed = parse(R"(, "echo": true, "max_tokens": 0)");
  CHECK(echoed.echo);
  CHECK_FALSE(echoed.requests.at(0).prompt_logprobs);
  const ParsedCompletion scored = parse(R"(, "echo": true, "logprobs": 1, "max_tokens": 0)");
  CHECK(scored.requests.at(0).prompt_logprobs);
  CHECK(scored.requests.at(0).max_tokens == 0);
  CHECK_THROWS_WITH(parse(R"(, "echo": 1)"), Catch::Equals("echo must be true or false"));
  // What logprobs would return is bounded: tokens scored x (alternatives + 1).
  ServeLimits small = limits;
  small.max_logprob_values = 40;
  const auto parse_small = [&](const std::string& fields) {
    return parse_completion_request(R"({"prompt": ["ab", "c"])" + fields + "}", tokenizer, 256, small);
  };
  CHECK(parse_small(R"(, "max_tokens": 4, "logprobs": 4)").requests.size() == 2);  // 2 x 4 x 5 = 40
  CHECK_THROWS_WITH(
      parse_small(R"(, "max_tokens": 4, "logprobs": 4, "echo": true)"),
      Catch::Equals("logprobs 4 of 11 tokens would return 55 values; this server returns at most "
                    "40 a request (fewer prompts, best_of, tokens or alternatives)"));
  // best_of scores each candidate's tokens, whether or not the client asked for logprobs.
  CHECK_THROWS_WITH(
      parse_small(R"(, "max_tokens": 8, "best_of": 3)"),
      Catch::Equals("logprobs 0 of 48 tokens (best_of scores every candidate's tokens) would "
                    "return 48 values; this server returns at most 40 a request (fewer prompts, "
                    "best_of, tokens or alternatives)"));
  CHECK_NOTHROW(parse_small(R"(, "max_tokens": 400, "echo": true)"));  // no logprobs: nothing to bound
}

TEST_CASE("best_of returns the n candidates of each prompt whose tokens are likeliest",
          "[serve][completion]") {
  // Candidate c of prompt p: generated tokens with logprobs[p][c] (after a
  // prompt entry, which does not count), ended by its length.
  const std::vector<std::vector<std::vector<float>>> logprobs{
      {{-5}, {-1, -3}, {-9, -9, -9}, {-3, -1}},  // means -5, -2, -9, -2
      {{-3}, {-2, -2, -2, -2}, {-0.5}, {-4}},    // means -3, -2, -0.5, -4: the mean, not the sum
  };
  std::vector<CompletionChoice> candidates;
  for (size_t p = 0; p < logprobs.size(); ++p)
    for (size_t c = 0; c < logprobs[p].size(); ++c) {
      CompletionChoice x;
      x.index = static_cast<int64_t>(candidates.size());
      x.text = std::to_string(p) + ":" + std::to_string(c);
      x.finish = c % 2 == 0 ? FinishReason::length : FinishReason::stop;
      TokenLogprob prompt_entry;
      prompt_entry.in_prompt = true;
      prompt_entry.logprob = 100;
      x.logprobs.push_back(prompt_entry);
      for (const float v : logprobs[p][c]) {
        TokenLogprob e;
        e.logprob = v;
        x.logprobs.push_back(e);
      }
      candidates.push_back(x);
    }
  candidates[6].finish = FinishReason::error;  // prompt 1's likeliest failed: last
  const std::vector<CompletionChoice> chosen = choose_best_of(candidates, 4, 2);
  REQUIRE(chosen.size() == 4);
  // Ties go to the earlier candidate; the indices run anew.
  CHECK(chosen[0].text == "0:1");
  CHECK(chosen[1].text == "0:3");
  CHECK(chosen[2].text == "1:1");
  CHECK(chosen[3].text == "1:0");
  for (size_t i = 0; i < chosen.size(); ++i) CHECK(chosen[i].index == static_cast<int64_t>(i));
  // A candidate cut short by the time limit, one with no token scored, and
  // NaN logits rank last, whatever their tokens.
  std::vector<CompletionChoice> cut = candidates;
  cut[1].finish = FinishReason::time_limit;
  cut[3].logprobs.resize(1);  // the prompt's entry alone: an empty text that ended by a stop string
  CHECK(choose_best_of(cut, 4, 1)[0].text == "0:0");
  cut[0].logprobs[1].logprob = NAN;
  CHECK(choose_best_of(cut, 4, 1)[0].text == "0:2");
  // With best_of = n every candidate is kept, in order.
  const std::vector<CompletionChoice> all = choose_best_of(candidates, 4, 4);
  REQUIRE(all.size() == 8);
  CHECK(all[2].text == "0:2");
}

TEST_CASE("a response's logprobs name each token, its offset and its alternatives", "[serve][completion]") {
  // "\xc3\xa9" is é: 256 holds both its bytes; 'a' and the lone 0xc3 are tokens of their own.
  const Tokenizer tokenizer({{0xc3, 0xa9}});
  CompletionChoice c;
  c.index = 1;
  c.text =
      "a\xc3\xa9"
      "a";  // the echoed prompt "a\xc3\xa9", then "a"
  c.with_logprobs = true;
  TokenLogprob first{'a', NAN, {}, true, 0, 0};
  TokenLogprob second{256, -0.5f, {{'a', -0.25f}}, true, 1, 1};  // the token itself is not among its top 1
  // Generated, after the echoed prompt's 2 characters (text_offset counts characters).
  TokenLogprob generated{'a', -0.25f, {{'a', -0.25f}, {0xc3, -3.0f}}, false, 0, 2};
  c.logprobs = {first, second, generated};
  c.finish = FinishReason::length;
  const nlohmann::json j = nlohmann::json::parse(completion_json({"cmpl-7", 5, "m"}, {c}, 2, 1, tokenizer));
  const nlohmann::json& choice = j["choices"][0];
  CHECK(choice["index"] == 1);
  CHECK(choice["finish_reason"] == "length");
  const nlohmann::json& l = choice["logprobs"];
  CHECK(l["tokens"] == nlohmann::json({"a", "\xc3\xa9", "a"}));
  CHECK(l["token_logprobs"][0].is_null());
  CHECK(l["token_logprobs"][1] == -0.5);
  CHECK(l["top_logprobs"][0].is_null());
  CHECK(l["top_logprobs"][1] == nlohmann::json({{"a", -0.25}, {"\xc3\xa9", -0.5}}));
  // A lone byte of a character is named by its bytes, as OpenAI does.
  CHECK(l["top_logprobs"][2] == nlohmann::json({{"a", -0.25}, {"bytes:\\xc3", -3.0}}));
  CHECK(l["text_offset"] == nlohmann::json({0, 1, 2}));
  CHECK(j["usage"]["total_tokens"] == 3);
  // Without logprobs asked: null; a streamed piece has no usage.
  c.with_logprobs = false;
  c.finish = FinishReason::none;
  const nlohmann::json chunk = nlohmann::json::parse(completion_chunk_json({"cmpl-7", 5, "m"}, c, tokenizer));
  CHECK(chunk["choices"][0]["logprobs"].is_null());
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  CHECK_FALSE(chunk.contains("usage"));
  CHECK_FALSE(chunk.contains("error"));
  // A failed choice's error beside the choices, whole and streamed.
  c.finish = FinishReason::error;
  c.error = "the forward failed";
  for (const std::string& body : {completion_json({"cmpl-7", 5, "m"}, {c}, 2, 1, tokenizer),
                                  completion_chunk_json({"cmpl-7", 5, "m"}, c, tokenizer)}) {
    const nlohmann::json failed = nlohmann::json::parse(body);
    CHECK(failed["error"]["message"] == "the forward failed");
    CHECK(failed["error"]["type"] == "server_error");
    CHECK(failed["choices"][0]["finish_reason"] == "error");
  }
}

TEST_CASE("the tokenizer endpoints encode, decode, and refuse what they cannot read", "[serve][completion]") {
  const Tokenizer tokenizer({{'a', 'b'}});
  const nlohmann::json t = nlohmann::json::parse(
      tokenize_json(R"({"prompt": "abc", "add_special_tokens": false})", tokenizer, 99));
  CHECK(t["tokens"] == nlohmann::json({256, 'c'}));
  CHECK(t["count"] == 2);
  CHECK(t["max_model_len"] == 99);
  CHECK(nlohmann::json::parse(detokenize_json(R"({"tokens": [256, 99, 257]})", tokenizer, 258))["prompt"] ==
        "abc");
  CHECK_THROWS_WITH(detokenize_json(R"({"tokens": [258]})", tokenizer, 258),
                    Catch::Equals("tokens holds 258, not a token id in [0, 258)"));
  CHECK_THROWS_WITH(detokenize_json(R"({"tokens": "ab"})", tokenizer, 258),
                    Catch::Contains("tokens is required"));
  CHECK_THROWS_WITH(tokenize_json(R"({"prompt": 3})", tokenizer, 9), Catch::Contains("prompt is required"));
  CHECK_THROWS_WITH(tokenize_json("[1]", tokenizer, 9), Catch::Contains("must be a JSON object"));
  CHECK_THROWS_WITH(tokenize_json("{", tokenizer, 9), Catch::Contains("not valid JSON"));
  // Refused unencoded where its fewest tokens (2 bytes at most each) pass the length.
  CHECK_THROWS_WITH(tokenize_json(R"({"prompt": "abababab"})", tokenizer, 3),
                    Catch::Equals("prompt is at least 4 tokens (8 bytes); this server takes at most 3"));
  const nlohmann::json info = nlohmann::json::parse(tokenizer_info_json(tokenizer, 300, 99));
  CHECK(info.contains("eos_token"));
  CHECK(info["eos_token"].is_null());
  CHECK(info["vocab_size"] == 300);
  CHECK(info["tokenizer_vocab_size"] == 257);
}
