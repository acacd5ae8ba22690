// Continuous batching (infer/completion_scheduler.h): requests decoded together,
// admitted from a queue, prompts in chunks, each getting exactly the text of
// decoding it alone; stop strings, cancellation and a full queue.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "helpers.h"
#include "infer/completion_scheduler.h"
#include "infer/infer_model.h"
#include "infer/infer_test_model.h"
#include "infer/lora_test_adapter.h"
#include "infer/sampler.h"
#include "infer/speculative.h"

namespace shamn {
namespace {

using namespace std::chrono_literals;

const char* kText = "the cat sat on the mat. the dog ran to the cat. a cat and a dog sat. ";

// The runtime tests' tiny model from `seed`, with a tokenizer trained on kText.
InferModel tiny_model(uint64_t seed = 3) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += kText;
  const test::TestModel model(test::model_toml(), "sched" + std::to_string(seed), seed);
  return model.runtime(ShqQuant::int8, Tokenizer::train(text, 300).to_text());
}

std::vector<int32_t> encode(const InferModel& m, const std::string& text) {
  const std::vector<uint32_t> ids = m.tokenizer()->encode(text);
  return {ids.begin(), ids.end()};
}

// What `shamn generate` prints after the prompt, cut before the first stop string.
std::string alone(const InferModel& m, const CompletionRequest& r) {
  const int64_t V = m.vocab_size();
  std::vector<float> logits(static_cast<size_t>(V));
  DecodeState state = m.new_state();
  Sampler sampler(r.sampling);
  m.forward(r.prompt.data(), static_cast<int64_t>(r.prompt.size()), state, logits.data(), false, r.adapter);
  std::string text;
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    const int32_t next = sampler.sample(logits.data(), V);
    if (next < m.tokenizer()->vocab_size()) text += m.tokenizer()->token_bytes(static_cast<uint32_t>(next));
    if (i + 1 < r.max_tokens) m.forward(&next, 1, state, logits.data(), false, r.adapter);
  }
  size_t cut = std::string::npos;
  for (const std::string& s : r.stop) cut = std::min(cut, text.find(s));
  return cut == std::string::npos ? text : text.substr(0, cut);
}

// Reads a completion to its end.
std::string drain(Completion& c, FinishReason& finish) {
  std::string text;
  for (;;) {
    Completion::Chunk chunk = c.take(1000ms);
    text += chunk.text;
    if (chunk.finished != FinishReason::none) {
      finish = chunk.finished;
      return text;
    }
  }
}

CompletionRequest request(const InferModel& m, const std::string& prompt, int64_t max_tokens,
                          double temperature, uint64_t seed) {
  CompletionRequest r;
  r.prompt = encode(m, prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

// What `shamn generate --draft` prints after the prompt.
std::string alone_speculative(const InferModel& m, const InferModel& draft, const CompletionRequest& r,
                              int64_t k) {
  SpeculativeDecoder decoder(m, draft, r.sampling, k);
  decoder.start(r.prompt);
  std::string text;
  for (int64_t produced = 0; produced < r.max_tokens;) {
    const SpeculativeRound round = decoder.next(r.max_tokens - produced - 1);
    for (const int32_t id : round.tokens)
      if (id < m.tokenizer()->vocab_size()) text += m.tokenizer()->token_bytes(static_cast<uint32_t>(id));
    produced += static_cast<int64_t>(round.tokens.size());
  }
  return text;
}

}  // namespace

namespace test {
struct CompletionDriver {
  static void append(Completion& c, const std::string& piece) { c.append(piece, {}); }
  static void finish(Completion& c) { c.finish(FinishReason::length); }
};
}  // namespace test

TEST_CASE("batched completions give each request the text it gets alone", "[infer][serve]") {
  // On 2 threads the streams draw their tokens in parallel, and a batch of 9
  // decodes as two groups of streams (infer_model.cpp, streams_grouped).
  test::ThreadCountGuard guard;
  const int threads = GENERATE(1, 2);
  set_num_threads(threads);
  const InferModel m = tiny_model();
  std::vector<CompletionRequest> requests;
  const char* prompts[] = {"the cat", "a dog sat on the mat. the", "the", "cat and"};
  for (int i = 0; i < 8; ++i)
    requests.push_back(request(m, prompts[i % 4], 5 + 7 * i, i % 3 == 0 ? 0.0 : 0.9, 100 + i));
  requests.push_back(request(m, "the mat", 0, 0.8, 1));  // nothing to generate
  // A batch smaller than the requests (some wait in the queue), prompts split
  // in chunks of 3 tokens, interleaved with other streams' decode steps, and a
  // batch of every request.
  for (const auto& [batch, chunk] : {std::pair<int64_t, int64_t>{3, 512}, {3, 3}, {9, 512}}) {
    CompletionScheduler scheduler(m, {batch, 16, chunk});
    std::vector<std::shared_ptr<Completion>> running;
    for (const CompletionRequest& r : requests) running.push_back(scheduler.submit(r));
    for (size_t i = 0; i < requests.size(); ++i) {
      REQUIRE(running[i] != nullptr);
      FinishReason finish = FinishReason::none;
      INFO("threads " << threads << ", batch " << batch << ", prefill chunk " << chunk << ", request " << i);
      CHECK(drain(*running[i], finish) == alone(m, requests[i]));
      CHECK(finish == FinishReason::length);
      CHECK(running[i]->completion_tokens() == requests[i].max_tokens);
    }
    const CompletionScheduler::Stats s = scheduler.stats();
    CHECK(s.submitted == 9);
    CHECK(s.finished_length == 9);
    int64_t generated = 0;
    for (const CompletionRequest& r : requests) generated += r.max_tokens;
    CHECK(s.generated_tokens == generated);
  }
}

TEST_CASE("requests with different LoRA adapters in one batch each get the text they get alone",
          "[infer][serve][lora]") {
  const InferModel m = tiny_model();
  test::Spec s1, s2;
  s1.q8 = true;
  s2.seed = 2;
  s2.rank = 2;
  s2.matrices = {"layers.0.mixer.out", "layers.1.moe.experts.0.up", "layers.1.moe.router_expert"};
  const LoraAdapter a1 = test::load_adapter(m, s1), a2 = test::load_adapter(m, s2);
  const LoraAdapter* which[] = {&a1, nullptr, &a2, &a1, &a2, nullptr};
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(
        request(m, i % 2 ? "the cat" : "a dog sat on", 6 + 3 * i, i % 3 == 0 ? 0.0 : 0.9, 7 + i));
    requests.back().adapter = which[i];
  }
  // The adapters change the text (so the check below sees them).
  CompletionRequest bare = requests[0];
  bare.adapter = nullptr;
  CHECK(alone(m, bare) != alone(m, requests[0]));
  CompletionScheduler scheduler(m, {4, 16, 3});
  std::vector<std::shared_ptr<Completion>> running;
  for (const CompletionRequest& r : requests) running.push_back(scheduler.submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    REQUIRE(running[i] != nullptr);
    FinishReason finish = FinishReason::none;
    INFO("request " << i);
    CHECK(drain(*running[i], finish) == alone(m, requests[i]));
  }
}

TEST_CASE("a request keeps its adapter alive when the adapter's owner lets go while it runs",
          "[infer][serve][lora]") {
  const InferModel m = tiny_model();
  test::Spec spec;
  spec.q8 = true;
  CompletionRequest r = request(m, "the cat", 300, 0.0, 5);
  std::string want;
  {
    const LoraAdapter a = test::load_adapter(m, spec);
    r.adapter = &a;
    want = alone(m, r);
    CompletionRequest bare = r;
    bare.adapter = nullptr;
    REQUIRE(alone(m, bare) != want);  // the adapter shows in the text
  }
  std::weak_ptr<const LoraAdapter> watch;
  {
    CompletionScheduler scheduler(m, {});
    auto owned = std::make_shared<const LoraAdapter>(test::load_adapter(m, spec));
    watch = owned;
    r.adapter = owned.get();
    r.keep_alive = owned;
    r.max_tokens = 1'000'000'000;  // runs until cancelled: still running below, whatever the timing
    std::shared_ptr<Completion> c = scheduler.submit(std::move(r));
    REQUIRE(c != nullptr);
    owned.reset();  // serve's unload: the running request holds the only reference
    CHECK_FALSE(watch.expired());
    // Greedy, so its first 300 tokens are the text above, with the adapter.
    std::string text;
    while (text.size() < want.size()) {
      const Completion::Chunk chunk = c->take(1000ms);
      REQUIRE(chunk.finished == FinishReason::none);
      text += chunk.text;
    }
    CHECK(text.substr(0, want.size()) == want);
    c->cancel();
    FinishReason finish = FinishReason::none;
    drain(*c, finish);
    CHECK(finish == FinishReason::cancelled);
  }
  CHECK(watch.expired());  // let go with the request (the scheduler is gone, so every request is)
}

TEST_CASE("a stop string ends the text before it, and no piece shows part of it", "[infer][serve]") {
  const InferModel m = tiny_model();
  CompletionRequest r = request(m, "the cat", 60, 0.0, 1);
  const std::string full = alone(m, r);
  REQUIRE(full.size() > 20);
  r.stop = {"\x01never", full.substr(12, 3)};
  CompletionScheduler scheduler(m, {});
  std::shared_ptr<Completion> c = scheduler.submit(r);
  std::string text;
  FinishReason finish = FinishReason::none;
  for (;;) {
    const Completion::Chunk chunk = c->take(1000ms);
    text += chunk.text;
    // Until the end, what was shown is a prefix of the final text.
    CHECK(full.compare(0, text.size(), text) == 0);
    if (chunk.finished != FinishReason::none) {
      finish = chunk.finished;
      break;
    }
  }
  CHECK(text == alone(m, r));
  CHECK(text.size() <= 12);
  CHECK(finish == FinishReason::stop);
  CHECK(scheduler.stats().finished_stop == 1);
}

// A whole (not streamed) response waits with Wake::on_end(): one take() returns the
// finished text however many tokens came before (with Wake::every(1) it returns at
// the first piece, long before 200 tokens are decoded).
TEST_CASE("a reader waiting for the end takes the whole text at once", "[infer][serve]") {
  const InferModel m = tiny_model();
  const CompletionRequest r = request(m, "the cat", 200, 0.8, 4);
  CompletionScheduler scheduler(m, {});
  std::shared_ptr<Completion> c = scheduler.submit(r);
  REQUIRE(c != nullptr);
  const Completion::Chunk chunk = c->take(60000ms, Completion::Wake::on_end());
  CHECK(chunk.finished == FinishReason::length);
  CHECK(chunk.text == alone(m, r));
  CHECK(c->completion_tokens() == 200);
}

// `serve --stream-interval N`: after the first text, a streamed reader wakes only
// once N more tokens came (or at the end), and the pieces still make up the text.
TEST_CASE("a reader waking every N tokens takes N or more at a time", "[infer][serve]") {
  const InferModel m = tiny_model();
  const CompletionRequest r = request(m, "the cat", 200, 0.8, 4);
  for (const int64_t every : {1, 8, 64}) {
    CompletionScheduler scheduler(m, {});
    std::shared_ptr<Completion> c = scheduler.submit(r);
    REQUIRE(c != nullptr);
    std::string text;
    INFO("every " << every);
    std::vector<int64_t> at;  // tokens at each take with text, until the last
    for (;;) {
      const Completion::Chunk chunk = c->take(60000ms, Completion::Wake::every(every));
      text += chunk.text;
      if (chunk.finished != FinishReason::none) {
        CHECK(chunk.finished == FinishReason::length);
        CHECK(chunk.tokens == 200);
        break;
      }
      REQUIRE_FALSE(chunk.text.empty());  // a 60 s wait ends only when the Wake is met
      at.push_back(chunk.tokens);
    }
    CHECK(text == alone(m, r));
    // `at` may be empty: a reader first scheduled after the last token takes it all at once.
    for (size_t i = 1; i < at.size(); ++i) CHECK(at[i] - at[i - 1] >= every);
    CHECK(static_cast<int64_t>(at.size()) <= 1 + 199 / every);
  }
}

// The same rules with the worker's side played by the test, one token at a time,
// and takes that do not wait: the first released text is taken at once, text
// short of N tokens stays for a later take, and Wake::on_end() gets only the end.
TEST_CASE("a take gets the first text at once, then N tokens at a time, or only the end", "[infer][serve]") {
  using Driver = test::CompletionDriver;
  using Wake = Completion::Wake;
  SECTION("every 4 tokens") {
    Completion c;
    CHECK(c.take(0ms, Wake::every(4)).text.empty());
    Driver::append(c, "\xc3");  // half of an e acute: not released yet
    CHECK(c.take(0ms, Wake::every(4)).text.empty());
    Driver::append(c, "\xa9");
    const Completion::Chunk first = c.take(0ms, Wake::every(4));
    CHECK(first.text == "\xc3\xa9");
    CHECK(first.tokens == 2);
    CHECK(first.finished == FinishReason::none);
    for (int i = 0; i < 3; ++i) Driver::append(c, "b");
    const Completion::Chunk short_of_n = c.take(0ms, Wake::every(4));
    CHECK(short_of_n.text.empty());
    CHECK(short_of_n.tokens == 5);
    Driver::append(c, "c");
    const Completion::Chunk four = c.take(0ms, Wake::every(4));
    CHECK(four.text == "bbbc");
    CHECK(four.tokens == 6);
    Driver::append(c, "d");
    Driver::finish(c);
    const Completion::Chunk end = c.take(0ms, Wake::every(4));
    CHECK(end.text == "d");
    CHECK(end.finished == FinishReason::length);
  }
  SECTION("only the end") {
    Completion c;
    Driver::append(c, "a");
    Driver::append(c, "b");
    CHECK(c.take(0ms, Wake::on_end()).text.empty());
    Driver::finish(c);
    const Completion::Chunk end = c.take(0ms, Wake::on_end());
    CHECK(end.text == "ab");
    CHECK(end.tokens == 2);
    CHECK(end.finished == FinishReason::length);
  }
}

TEST_CASE("a cancelled completion ends at the next step, and a full queue refuses", "[infer][serve]") {
  const InferModel m = tiny_model();
  CompletionScheduler scheduler(m, {1, 1, 512});
  std::shared_ptr<Completion> first = scheduler.submit(request(m, "the cat", 100000000, 0.8, 1));
  std::shared_ptr<Completion> second = scheduler.submit(request(m, "the dog", 100000000, 0.8, 2));
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  // One running, one waiting, whichever the worker has admitted yet: no room left.
  CHECK(scheduler.submit(request(m, "the", 5, 0.8, 3)) == nullptr);
  CHECK(scheduler.stats().rejected == 1);
  first->cancel();
  second->cancel();
  FinishReason finish = FinishReason::none;
  drain(*first, finish);
  CHECK(finish == FinishReason::cancelled);
  drain(*second, finish);
  CHECK(finish == FinishReason::cancelled);
  CHECK(scheduler.stats().cancelled == 2);
}

TEST_CASE("a request's completions are queued all together or none", "[infer][serve]") {
  const InferModel m = tiny_model();
  CompletionScheduler scheduler(m, {1, 1, 512});
  std::shared_ptr<Completion> first = scheduler.submit(request(m, "the cat", 100000000, 0.8, 1));
  REQUIRE(first != nullptr);
  // Room for one more, whether or not the worker has admitted the first: two are refused whole.
  std::vector<CompletionRequest> two{request(m, "the", 5, 0.8, 2), request(m, "the", 5, 0.8, 3)};
  CHECK(scheduler.submit_all(two).empty());
  CHECK(scheduler.stats().rejected == 2);
  CHECK(scheduler.stats().submitted == 1);
  // One invalid request refuses the others too, before any is queued.
  two[1].prompt.clear();
  CHECK_THROWS_WITH(scheduler.submit_all(two), Catch::Contains("prompt is empty"));
  CHECK(scheduler.stats().submitted == 1);
  std::vector<std::shared_ptr<Completion>> second =
      scheduler.submit_all({request(m, "the dog", 100000000, 0.8, 4)});
  REQUIRE(second.size() == 1);
  REQUIRE(second[0] != nullptr);
  CHECK(scheduler.stats().submitted == 2);
  first->cancel();
  second[0]->cancel();
  FinishReason finish = FinishReason::none;
  drain(*first, finish);
  drain(*second[0], finish);
  CHECK(scheduler.stats().cancelled == 2);
}

TEST_CASE("requests are checked, and shutdown cancels what runs and refuses more", "[infer][serve]") {
  const InferModel m = tiny_model();
  CompletionScheduler scheduler(m, {});
  CompletionRequest empty = request(m, "the", 5, 0.8, 1);
  empty.prompt.clear();
  CHECK_THROWS_WITH(scheduler.submit(empty), Catch::Contains("prompt is empty"));
  CompletionRequest out_of_range = request(m, "the", 5, 0.8, 1);
  out_of_range.prompt[0] = 300;
  CHECK_THROWS_WITH(scheduler.submit(out_of_range), Catch::Contains("outside the vocabulary"));
  CompletionRequest bad_p = request(m, "the", 5, 0.8, 1);
  bad_p.sampling.top_p = 0;
  CHECK_THROWS(scheduler.submit(bad_p));
  std::shared_ptr<Completion> running = scheduler.submit(request(m, "the cat", 100000000, 0.8, 1));
  scheduler.shutdown();
  FinishReason finish = FinishReason::none;
  drain(*running, finish);
  CHECK(finish == FinishReason::cancelled);
  CHECK(scheduler.submit(request(m, "the", 5, 0.8, 1)) == nullptr);
}

// A token's text (ids past the tokenizer have none).
std::string text_of(const InferModel& m, int32_t id) {
  return id < m.tokenizer()->vocab_size() ? m.tokenizer()->token_bytes(static_cast<uint32_t>(id)) : "";
}

// The log-probabilities a request's entries should hold, from one forward over
// its prompt and generated tokens with every position's logits: entry j (j >= 1)
// is token j's log-softmax under row j - 1.
struct Scored {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logprobs;  // [tokens - 1][V]
};
Scored score(const InferModel& m, std::vector<int32_t> tokens) {
  const int64_t V = m.vocab_size(), n = static_cast<int64_t>(tokens.size()) - 1;
  std::vector<float> logits(static_cast<size_t>(std::max<int64_t>(n, 1) * V));
  DecodeState state = m.new_state();
  if (n > 0) m.forward(tokens.data(), n, state, logits.data(), true);
  Scored out{std::move(tokens), {}};
  for (int64_t r = 0; r < n; ++r) {
    const float* row = logits.data() + r * V;
    double max = row[0], sum = 0;
    for (int64_t v = 0; v < V; ++v) max = std::max(max, static_cast<double>(row[v]));
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    std::vector<double> lp(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) lp[v] = row[v] - max - std::log(sum);
    out.logprobs.push_back(std::move(lp));
  }
  return out;
}

TEST_CASE("logprobs: each token's log-softmax and its likeliest alternatives, the prompt's with echo",
          "[infer][serve]") {
  const InferModel m = tiny_model();
  std::vector<CompletionRequest> requests;
  requests.push_back(request(m, "a dog sat on the mat. the", 6, 0.9, 11));  // prompt and tokens scored
  requests.back().logprobs = 3;
  requests.back().prompt_logprobs = true;
  requests.back().echo = true;  // its generated text's offsets count from the prompt's
  requests.push_back(request(m, "the cat sat", 9, 0.9, 12));             // no logprobs, in the same batch
  requests.push_back(request(m, "the dog ran to the cat", 0, 0.0, 13));  // the prompt alone scored
  requests.back().logprobs = 1;
  requests.back().prompt_logprobs = true;
  requests.push_back(request(m, "cat and a", 5, 0.0, 14));  // generated tokens only, no alternatives
  requests.back().logprobs = 0;
  requests.push_back(request(m, "the", 4, 0.9, 15));  // a one-token prompt scored
  requests.back().logprobs = 2;
  requests.back().prompt_logprobs = true;
  // Long scored prompts: in one batch, more rows than a step's budget for scored
  // prompts (CompletionScheduler::kScoredRowsPerStep), so some wait a step.
  std::string longer;
  for (int i = 0; i < 4; ++i) longer += kText;
  for (int i = 0; i < 5; ++i) {
    requests.push_back(request(m, longer.substr(static_cast<size_t>(i)), 3, 0.9, 30 + i));
    requests.back().logprobs = 1;
    requests.back().prompt_logprobs = true;
    REQUIRE(requests.back().prompt.size() > 64);
  }
  // Prompts in chunks of 3 tokens among other streams' steps, and whole, a few
  // streams at a time and all at once.
  for (const auto& [batch, chunk] : {std::pair<int64_t, int64_t>{3, 3}, {3, 512}, {10, 512}}) {
    CompletionScheduler scheduler(m, {batch, 16, chunk});
    std::vector<std::shared_ptr<Completion>> running;
    for (const CompletionRequest& r : requests) running.push_back(scheduler.submit(r));
    for (size_t i = 0; i < requests.size(); ++i) {
      const CompletionRequest& r = requests[i];
      INFO("batch " << batch << ", prefill chunk " << chunk << ", request " << i);
      std::string text;
      std::vector<TokenLogprob> entries;
      for (;;) {
        Completion::Chunk c = running[i]->take(1000ms);
        text += c.text;
        for (TokenLogprob& e : c.logprobs) entries.push_back(std::move(e));
        if (c.finished != FinishReason::none) {
          CHECK(c.finished == FinishReason::length);
          break;
        }
      }
      CHECK(text == alone(m, r));  // logprobs change nothing drawn
      if (r.logprobs < 0) {
        CHECK(entries.empty());
        continue;
      }
      const size_t prompt_n = r.prompt_logprobs ? r.prompt.size() : 0;
      REQUIRE(entries.size() == prompt_n + static_cast<size_t>(r.max_tokens));
      std::vector<int32_t> tokens = r.prompt;
      std::string generated;
      for (size_t j = 0; j < entries.size(); ++j) {
        CHECK(entries[j].in_prompt == (j < prompt_n));
        if (j >= prompt_n) {
          tokens.push_back(entries[j].token);
          CHECK(entries[j].offset == static_cast<int64_t>(generated.size()));
          const std::string shown =
              r.echo ? m.tokenizer()->decode(reinterpret_cast<const uint32_t*>(r.prompt.data()),
                                             static_cast<int64_t>(r.prompt.size()))
                     : "";
          CHECK(entries[j].char_offset == utf8_characters(shown + generated));
          generated += text_of(m, entries[j].token);
        } else {
          CHECK(entries[j].token == r.prompt[j]);
          CHECK(entries[j].offset ==
                static_cast<int64_t>(
                    m.tokenizer()
                        ->decode(reinterpret_cast<const uint32_t*>(r.prompt.data()), static_cast<int64_t>(j))
                        .size()));
        }
      }
      CHECK(generated == text);
      const Scored want = score(m, tokens);
      const size_t skip = r.prompt.size() - prompt_n;  // the prompt tokens without entries
      for (size_t j = 0; j < entries.size(); ++j) {
        const size_t at = j + skip;  // the entry's position in tokens
        const TokenLogprob& e = entries[j];
        if (at == 0) {
          CHECK(std::isnan(e.logprob));
          CHECK(e.top.empty());
          continue;
        }
        const std::vector<double>& lp = want.logprobs[at - 1];
        CHECK(e.logprob == Approx(lp[static_cast<size_t>(tokens[at])]).margin(1e-4));
        REQUIRE(e.top.size() == static_cast<size_t>(r.logprobs));
        for (size_t k = 0; k < e.top.size(); ++k) {
          CHECK(e.top[k].second == Approx(lp[static_cast<size_t>(e.top[k].first)]).margin(1e-4));
          if (k > 0) CHECK(e.top[k].second <= e.top[k - 1].second);
        }
        if (!e.top.empty())
          CHECK(e.top[0].second == Approx(*std::max_element(lp.begin(), lp.end())).margin(1e-4));
      }
    }
  }
}

TEST_CASE("characters are counted as a replacing UTF-8 decoder shows them", "[infer][serve]") {
  // Python's bytes.decode("utf-8", "replace") gives these lengths; "strict"
  // decodes the well-formed ones.
  struct Case {
    const char* text;
    int64_t characters;
    bool well_formed;
  };
  const Case cases[] = {{"a\xa9"
                         "b",
                         3, false},
                        {"a\xc3"
                         "b",
                         3, false},
                        {"\xc3\xa9\xa9", 2, false},
                        {"\xe2\x82"
                         "x",
                         2, false},
                        {"\xf0\x9f\x98", 1, false},
                        {"\xff\xfe", 2, false},
                        {"\xe2\x82\xac\x80", 2, false},
                        {"\xed\xa0\x80", 3, false},
                        {"\xc0\xaf", 2, false},
                        {"h\xc3\xa9llo", 5, true},
                        {"\xf0\x9f\x98\x80!", 2, true},
                        {"\xe0\x80\x80", 3, false},
                        {"\xf4\x90\x80\x80", 4, false},
                        {"\xe2\x82\xac", 1, true},
                        {"", 0, true}};
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK(utf8_characters(c.text) == c.characters);
    // Byte by byte, as tokens add to a text, the same count.
    Utf8Counter counter;
    for (const char* p = c.text; *p; ++p) counter.add(std::string_view(p, 1));
    CHECK(counter.characters() == c.characters);
    CHECK(counter.well_formed() == c.well_formed);
  }
}

TEST_CASE("a stop string drops the entries of tokens that start at or after it", "[infer][serve]") {
  const InferModel m = tiny_model();
  CompletionRequest r = request(m, "the cat", 60, 0.0, 1);
  r.logprobs = 1;
  const std::string full = alone(m, r);
  REQUIRE(full.size() > 20);
  r.stop = {full.substr(12, 3)};
  CompletionScheduler scheduler(m, {});
  const Completion::Chunk c = scheduler.submit(r)->take(60000ms, Completion::Wake::on_end());
  REQUIRE(c.finished == FinishReason::stop);
  REQUIRE_FALSE(c.logprobs.empty());
  std::string bytes;
  for (const TokenLogprob& e : c.logprobs) {
    CHECK(e.offset == static_cast<int64_t>(bytes.size()));
    CHECK(e.offset < static_cast<int64_t>(c.text.size()));  // each entry's token shows in the text
    bytes += text_of(m, e.token);
  }
  CHECK(bytes.size() >= c.text.size());  // and together they cover it
  CHECK(bytes.compare(0, c.text.size(), c.text) == 0);
}

TEST_CASE("with a draft model each request gets the text of generate --draft", "[infer][serve]") {
  const InferModel m = tiny_model(3), draft = tiny_model(4);
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 5; ++i)
    requests.push_back(request(m, i % 2 ? "the cat" : "a dog sat", 3 + 9 * i, i % 2 ? 0.0 : 0.9, 50 + i));
  for (const int64_t k : {int64_t{1}, int64_t{3}}) {
    CompletionScheduler::Options o;
    o.max_batch = 2;
    o.draft = &draft;
    o.draft_tokens = k;
    CompletionScheduler scheduler(m, o);
    CompletionRequest scored = requests[0];
    scored.logprobs = 1;
    CHECK_THROWS_WITH(scheduler.submit(scored), Catch::Contains("not available with a draft model"));
    CompletionRequest penalised = requests[0];
    penalised.sampling.presence_penalty = 0.5;
    CHECK_THROWS_WITH(scheduler.submit(penalised), Catch::Contains("not available with a draft model"));
    std::vector<std::shared_ptr<Completion>> running;
    for (const CompletionRequest& r : requests) running.push_back(scheduler.submit(r));
    for (size_t i = 0; i < requests.size(); ++i) {
      FinishReason finish = FinishReason::none;
      INFO("request " << i << ", K " << k);
      CHECK(drain(*running[i], finish) == alone_speculative(m, draft, requests[i], k));
      CHECK(finish == FinishReason::length);
      CHECK(running[i]->completion_tokens() == requests[i].max_tokens);
    }
  }
}

}  // namespace shamn
