#include "infer/completion_scheduler.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/fault.h"
#include "core/parallel.h"
#include "infer/speculative.h"

namespace shamn {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The end of text[0, end) moved back so that it does not split a UTF-8
// character: a client shown the text piece by piece never sees half of one.
size_t whole_characters(const std::string& text, size_t end) {
  for (size_t k = 1; k <= 4 && k <= end; ++k) {
    const auto c = static_cast<unsigned char>(text[end - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > k ? end - k : end;
  }
  return end;  // not UTF-8 here: nothing to keep together
}

// Nearest-rank quantile of the last finished requests.
double quantile(std::deque<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[rank];
}

void remember(std::deque<double>& window, double value) {
  window.push_back(value);
  if (window.size() > 1000) window.pop_front();
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none:
      return "none";
    case FinishReason::length:
      return "length";
    case FinishReason::stop:
      return "stop";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::time_limit:
      return "time_limit";
    case FinishReason::error:
      return "error";
  }
  return "?";
}

// ---- Completion ----

bool Completion::ready_locked() const {
  if (finished_ != FinishReason::none) return true;
  if (wake_.tokens == 0 || taken_ == released_) return false;
  return taken_ == 0 || tokens_ - tokens_taken_ >= wake_.tokens;
}

Completion::Chunk Completion::take(std::chrono::milliseconds wait, Wake wake) {
  SHAMN_CHECK(wake.tokens >= 0, "Completion::take: Wake of ", wake.tokens, " tokens");
  std::unique_lock lock(mutex_);
  wake_ = wake;
  Chunk c;
  // Text short of the Wake stays for a later take: a heartbeat does not break the
  // reader's rhythm of N tokens an event.
  const bool ready = changed_.wait_for(lock, wait, [&] { return ready_locked(); });
  c.tokens = tokens_;
  if (!ready) return c;
  c.text = text_.substr(taken_, released_ - taken_);
  taken_ = released_;
  tokens_taken_ = tokens_;
  const size_t entries = logprobs_released_locked();
  // Moved out: a handed-out entry is never read again but for its offsets (the
  // stop cut's), which a move leaves; its alternatives are not kept twice.
  c.logprobs.assign(std::make_move_iterator(logprobs_.begin() + static_cast<std::ptrdiff_t>(logprobs_taken_)),
                    std::make_move_iterator(logprobs_.begin() + static_cast<std::ptrdiff_t>(entries)));
  logprobs_taken_ = entries;
  if (taken_ == text_.size()) {
    c.finished = finished_;
    c.error = error_;
  }
  return c;
}

void Completion::cancel() {
  const std::lock_guard lock(mutex_);
  cancel_ = true;
}

bool Completion::cancelled() const {
  const std::lock_guard lock(mutex_);
  return cancel_;
}

int64_t Completion::completion_tokens() const {
  const std::lock_guard lock(mutex_);
  return tokens_;
}

size_t Completion::logprobs_released_locked() const {
  if (finished_ != FinishReason::none) return logprobs_.size();
  size_t end = logprobs_taken_;
  while (end < logprobs_.size() &&
         (logprobs_[end].in_prompt ? prompt_logprobs_done_
                                   : logprobs_[end].offset < static_cast<int64_t>(released_)))
    ++end;
  return end;
}

void Completion::add_prompt_logprobs(std::vector<TokenLogprob> entries, bool last) {
  const std::lock_guard lock(mutex_);
  for (TokenLogprob& e : entries) logprobs_.push_back(std::move(e));
  prompt_logprobs_done_ = last;
}

bool Completion::append(const std::string& piece, const std::vector<std::string>& stop,
                        TokenLogprob* logprob) {
  std::unique_lock lock(mutex_);
  const size_t before = text_.size();
  text_ += piece;
  ++tokens_;
  if (logprob) {
    logprob->in_prompt = false;
    logprob->offset = static_cast<int64_t>(before);
    logprob->char_offset = text_characters_.characters();
    logprobs_.push_back(std::move(*logprob));
  }
  text_characters_.add(piece);
  size_t longest = 0;
  for (const std::string& s : stop) longest = std::max(longest, s.size());
  // A stop string ending in the new piece starts at most longest - 1 bytes before it.
  const size_t from = before >= longest ? before - longest + 1 : 0;
  size_t cut = std::string::npos;
  for (const std::string& s : stop)
    if (!s.empty()) cut = std::min(cut, text_.find(s, from));
  if (cut != std::string::npos) {
    text_.resize(cut);
    // A token whose text starts at or after the cut is not in the text.
    while (!logprobs_.empty() && !logprobs_.back().in_prompt &&
           logprobs_.back().offset >= static_cast<int64_t>(cut))
      logprobs_.pop_back();
    return true;  // finish() releases the rest
  }
  // Held back: the last longest - 1 bytes, which may be the start of a stop string.
  const size_t safe = text_.size() - std::min(text_.size(), longest > 0 ? longest - 1 : 0);
  released_ = std::max(released_, whole_characters(text_, safe));
  // Woken after the unlock, the reader does not block at once on the mutex. (A
  // reader that is not waiting costs notify_all no system call.)
  const bool wake = ready_locked();
  lock.unlock();
  if (wake) changed_.notify_all();
  return false;
}

void Completion::finish(FinishReason reason, std::string error) {
  const std::lock_guard lock(mutex_);
  if (finished_ == FinishReason::none) {
    finished_ = reason;
    error_ = std::move(error);
  }
  released_ = text_.size();
  changed_.notify_all();
}

// ---- CompletionScheduler ----

struct CompletionScheduler::Stream {
  CompletionRequest request;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();
  DecodeState state;
  Sampler sampler;
  int64_t prefilled = 0;               // prompt tokens through the model so far
  int32_t next = 0;                    // the last sampled token, fed at the next step
  TokenLogprob next_logprob;           // next's entry, where the request asks for logprobs
  int64_t prompt_text_bytes = 0;       // the prompt's text so far: its entries' offsets
  Utf8Counter prompt_text_characters;  // (in bytes and in characters)
  Clock::time_point submitted = Clock::now();
  double first_token_s = -1;
  bool done = false;
  std::unique_ptr<SpeculativeDecoder> speculative;  // with a draft model, once started

  Stream(CompletionRequest r, DecodeState s)
      : request(std::move(r)), state(std::move(s)), sampler(request.sampling) {}

  bool expired(Clock::time_point now) const {
    return request.time_limit_s > 0 && seconds_between(submitted, now) > request.time_limit_s;
  }
};

CompletionScheduler::CompletionScheduler(const InferModel& model, Options options)
    : model_(model), options_(options) {
  SHAMN_INPUT_CHECK(model.tokenizer().has_value(),
                    "the model file has no tokenizer: re-export it with --tokenizer PATH");
  SHAMN_INPUT_CHECK(options.max_batch >= 1 && options.max_queue >= 0 && options.prefill_chunk >= 1,
                    "the batch and the prefill chunk must hold at least one, the queue zero or more");
  SHAMN_INPUT_CHECK(options.draft_tokens >= 1 && options.draft_tokens <= kMaxDraftTokens, "draft tokens ",
                    options.draft_tokens, " must be in [1, ", kMaxDraftTokens, "]");
  worker_ = std::thread([this] { run(); });
}

void CompletionScheduler::shutdown() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
}

CompletionScheduler::~CompletionScheduler() { shutdown(); }

std::unique_ptr<CompletionScheduler::Stream> CompletionScheduler::checked_stream(
    CompletionRequest request) const {
  SHAMN_INPUT_CHECK(!request.prompt.empty(), "the prompt is empty: the model needs a token to continue");
  for (const int32_t t : request.prompt)
    SHAMN_INPUT_CHECK(t >= 0 && t < model_.vocab_size(), "prompt token ", t,
                      " is outside the vocabulary [0, ", model_.vocab_size(), ")");
  SHAMN_INPUT_CHECK(request.max_tokens >= 0, "max_tokens must be >= 0");
  SHAMN_INPUT_CHECK(request.time_limit_s >= 0, "the time limit must be >= 0");
  request.sampling.validate();
  SHAMN_INPUT_CHECK(request.logprobs >= -1, "logprobs must be >= 0, or -1 for none");
  SHAMN_INPUT_CHECK(!request.prompt_logprobs || request.logprobs >= 0,
                    "the prompt's logprobs need logprobs >= 0");
  request.sampling.check_vocabulary(model_.vocab_size());
  if (options_.draft != nullptr) check_speculative_request(request.sampling, request.logprobs >= 0);
  auto stream = std::make_unique<Stream>(std::move(request), model_.new_state());
  Completion& completion = *stream->completion;
  completion.prompt_tokens_ = static_cast<int64_t>(stream->request.prompt.size());
  completion.prompt_logprobs_done_ = !stream->request.prompt_logprobs;
  if (stream->request.echo)
    for (const int32_t id : stream->request.prompt)
      completion.text_characters_.add(model_.tokenizer()->model_token_bytes(id));
  return stream;
}

std::shared_ptr<Completion> CompletionScheduler::submit(CompletionRequest request) {
  std::vector<CompletionRequest> one;
  one.push_back(std::move(request));
  std::vector<std::shared_ptr<Completion>> submitted = submit_all(std::move(one));
  return submitted.empty() ? nullptr : std::move(submitted.front());
}

std::vector<std::shared_ptr<Completion>> CompletionScheduler::submit_all(
    std::vector<CompletionRequest> requests) {
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::shared_ptr<Completion>> completions;
  for (CompletionRequest& r : requests) {
    streams.push_back(checked_stream(std::move(r)));
    completions.push_back(streams.back()->completion);
  }
  const auto n = static_cast<int64_t>(streams.size());
  {
    const std::lock_guard lock(mutex_);
    const int64_t free_slots = options_.max_batch - running_count_;
    if (stopping_ ||
        static_cast<int64_t>(queue_.size()) + n > options_.max_queue + std::max<int64_t>(free_slots, 0)) {
      counts_.rejected += n;
      return {};
    }
    counts_.submitted += n;
    for (std::unique_ptr<Stream>& stream : streams) queue_.push_back(std::move(stream));
  }
  work_.notify_all();
  return completions;
}

CompletionScheduler::Stats CompletionScheduler::stats() const {
  const std::lock_guard lock(mutex_);
  Stats s = counts_;
  s.queued = static_cast<int64_t>(queue_.size());
  s.running = running_count_;
  s.latency_p50 = quantile(latencies_, 0.5);
  s.latency_p99 = quantile(latencies_, 0.99);
  s.first_token_p50 = quantile(first_tokens_, 0.5);
  s.first_token_p99 = quantile(first_tokens_, 0.99);
  return s;
}

void CompletionScheduler::run() {
  for (;;) {
    std::vector<std::unique_ptr<Stream>> ended;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty(); });
      if (stopping_) break;
      ended = admit_locked();
    }
    for (auto& s : ended)
      retire(*s, s->completion->cancelled() ? FinishReason::cancelled : FinishReason::time_limit);
    step();
  }
  for (auto& s : running_) retire(*s, FinishReason::cancelled);
  std::deque<std::unique_ptr<Stream>> waiting;
  {
    const std::lock_guard lock(mutex_);
    waiting.swap(queue_);
  }
  for (auto& s : waiting) retire(*s, FinishReason::cancelled);
}

// Under mutex_: the waiting requests fill the batch in arrival order. Those
// cancelled or out of time are returned, to end outside the lock.
std::vector<std::unique_ptr<CompletionScheduler::Stream>> CompletionScheduler::admit_locked() {
  const Clock::time_point now = Clock::now();
  std::deque<std::unique_ptr<Stream>> kept;
  std::vector<std::unique_ptr<Stream>> ended;
  for (auto& s : queue_) {
    if (s->completion->cancelled() || s->expired(now))
      ended.push_back(std::move(s));
    else
      kept.push_back(std::move(s));
  }
  queue_.swap(kept);
  while (!queue_.empty() && static_cast<int64_t>(running_.size()) < options_.max_batch) {
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  running_count_ = static_cast<int64_t>(running_.size());
  return ended;
}

void CompletionScheduler::step() {
  const Clock::time_point now = Clock::now();
  for (auto& s : running_) {
    if (s->done) continue;
    if (s->completion->cancelled())
      retire(*s, FinishReason::cancelled);
    else if (s->expired(now))
      retire(*s, FinishReason::time_limit);
    else if (s->request.max_tokens == 0 && !s->request.prompt_logprobs)
      retire(*s, FinishReason::length);
  }
  if (options_.draft != nullptr) return speculative_step();
  // One step per live stream: its next prompt chunk, or its last sampled token.
  std::vector<StreamStep> steps;
  std::vector<Stream*> owners;
  std::vector<uint8_t> samples;      // whether the step's logits give a new token
  std::vector<uint8_t> prompt_ends;  // whether the step ends the stream's prompt
  std::vector<int64_t> first_row;    // the step's first row of logits
  std::vector<int64_t> first_token;  // the step's first prompt position (prompt steps)
  int64_t rows = 0, scored_rows = 0;
  for (auto& s : running_) {
    if (s->done) continue;
    const auto prompt_n = static_cast<int64_t>(s->request.prompt.size());
    const bool all = s->prefilled < prompt_n && s->request.prompt_logprobs;
    // Scored prompts take every position's logits: [n, V] floats a stream, so in
    // smaller chunks, and a stream past the step's budget waits for the next.
    const int64_t scored_room = kScoredRowsPerStep - scored_rows;
    if (all && scored_room == 0) continue;
    first_row.push_back(rows);
    first_token.push_back(s->prefilled);
    if (s->prefilled < prompt_n) {
      const int64_t chunk =
          all ? std::min({options_.prefill_chunk, kScoredPrefillChunk, scored_room}) : options_.prefill_chunk;
      const int64_t n = std::min(chunk, prompt_n - s->prefilled);
      if (all) scored_rows += n;
      steps.push_back({&s->state, s->request.prompt.data() + s->prefilled, n, all});
      s->prefilled += n;
      prompt_ends.push_back(s->prefilled == prompt_n);
      samples.push_back(s->prefilled == prompt_n && s->request.max_tokens > 0);
      rows += all ? n : 1;
    } else {
      steps.push_back({&s->state, &s->next, 1, false});
      prompt_ends.push_back(0);
      samples.push_back(1);
      rows += 1;
    }
    steps.back().adapter = s->request.adapter;
    owners.push_back(s.get());
  }
  int64_t generated = 0, prompt_tokens = 0;
  std::vector<std::pair<Stream*, FinishReason>> ending;
  if (!steps.empty()) {
    const int64_t V = model_.vocab_size();
    // Grows to the largest batch and stays (the forward writes every row it uses).
    step_logits_.reserve_at_least(rows * V);
    float* const logits = step_logits_.data();
    try {
      if (fault::armed() && fault::pass("serve.step") != 0)
        throw std::runtime_error("the model's forward failed (SHAMN_FAULT serve.step)");
      model_.forward(steps, logits);
    } catch (const std::exception& e) {
      for (Stream* s : owners) retire(*s, FinishReason::error, e.what());
      owners.clear();
    }
    const Tokenizer& tok = *model_.tokenizer();
    // Each stream samples with its own Sampler (its own random stream and
    // scratch), so the streams sample in parallel and each stream's draws keep
    // their order (at V = 32,000 and top-k 40 a draw is about 5 us: 64 in a row
    // were a sixth of a 64-stream step).
    parallel_for(0, static_cast<int64_t>(owners.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        Stream& s = *owners[i];
        const StreamStep& st = steps[i];
        if (st.all_logits) score_prompt(s, logits + first_row[i] * V, first_token[i], st.n, prompt_ends[i]);
        if (!samples[i]) continue;
        const float* row = logits + (first_row[i] + (st.all_logits ? st.n - 1 : 0)) * V;
        s.next = s.sampler.sample(row, V);
        if (s.request.logprobs >= 0) s.next_logprob = token_logprob(row, V, s.next, s.request.logprobs);
      }
    });
    for (size_t i = 0; i < owners.size(); ++i) {
      Stream& s = *owners[i];
      if (steps[i].tokens != &s.next) prompt_tokens += steps[i].n;
      if (!samples[i]) {
        // A scored prompt with nothing to generate ends with its prompt.
        if (prompt_ends[i] && s.request.max_tokens == 0) ending.emplace_back(&s, FinishReason::length);
        continue;
      }
      ++generated;
      if (s.first_token_s < 0) s.first_token_s = seconds_between(s.submitted, Clock::now());
      TokenLogprob* logprob = s.request.logprobs >= 0 ? &s.next_logprob : nullptr;
      if (s.completion->append(tok.model_token_bytes(s.next), s.request.stop, logprob))
        ending.emplace_back(&s, FinishReason::stop);
      else if (s.completion->completion_tokens() >= s.request.max_tokens)
        ending.emplace_back(&s, FinishReason::length);
    }
  }
  end_step(generated, prompt_tokens, !steps.empty(), ending);
}

// The prompt entries of one chunk's logits [n, V], positions [first, first + n):
// row r predicts the prompt's token first + r + 1 (the last row of the last
// chunk predicts the first generated token instead); the prompt's first token
// gets an entry with none.
void CompletionScheduler::score_prompt(Stream& s, const float* logits, int64_t first, int64_t n,
                                       bool last) const {
  const Tokenizer& tok = *model_.tokenizer();
  const std::vector<int32_t>& prompt = s.request.prompt;
  const auto prompt_n = static_cast<int64_t>(prompt.size());
  const int64_t V = model_.vocab_size();
  std::vector<TokenLogprob> entries;
  const auto add = [&](TokenLogprob e) {
    e.in_prompt = true;
    const std::string& text = tok.model_token_bytes(e.token);
    e.offset = s.prompt_text_bytes;
    e.char_offset = s.prompt_text_characters.characters();
    s.prompt_text_bytes += static_cast<int64_t>(text.size());
    s.prompt_text_characters.add(text);
    entries.push_back(std::move(e));
  };
  if (first == 0) {
    TokenLogprob e;
    e.token = prompt[0];
    e.logprob = std::numeric_limits<float>::quiet_NaN();
    add(std::move(e));
  }
  for (int64_t r = 0; r < n && first + r + 1 < prompt_n; ++r)
    add(token_logprob(logits + r * V, V, prompt[first + r + 1], s.request.logprobs));
  s.completion->add_prompt_logprobs(std::move(entries), last);
}

void CompletionScheduler::end_step(int64_t generated, int64_t prompt_tokens, bool stepped,
                                   const std::vector<std::pair<Stream*, FinishReason>>& ending) {
  {
    const std::lock_guard lock(mutex_);
    counts_.generated_tokens += generated;
    counts_.prompt_tokens += prompt_tokens;
    if (stepped) ++counts_.steps;
  }
  // After the counts: a reader that sees its completion end sees its tokens counted.
  for (const auto& [s, reason] : ending) retire(*s, reason);
  std::erase_if(running_, [](const std::unique_ptr<Stream>& s) { return s->done; });
  const std::lock_guard lock(mutex_);
  running_count_ = static_cast<int64_t>(running_.size());
}

// Each live stream: its prompt through both models on its first step, then one
// round (drafts verified in one pass) per step, the calls `shamn generate
// --draft` makes in the same order.
void CompletionScheduler::speculative_step() {
  const Tokenizer& tok = *model_.tokenizer();
  int64_t generated = 0, prompt_tokens = 0;
  std::vector<std::pair<Stream*, FinishReason>> ending;
  bool stepped = false;
  for (auto& sp : running_) {
    Stream& s = *sp;
    if (s.done) continue;
    stepped = true;
    try {
      if (!s.speculative) {
        s.speculative = std::make_unique<SpeculativeDecoder>(model_, *options_.draft, s.request.sampling,
                                                             options_.draft_tokens, s.request.adapter);
        s.speculative->start(s.request.prompt);
        prompt_tokens += static_cast<int64_t>(s.request.prompt.size());
      }
      const int64_t produced = s.completion->completion_tokens();
      // At most as many drafts as leave room for the target's own token.
      const SpeculativeRound round = s.speculative->next(s.request.max_tokens - produced - 1);
      if (s.first_token_s < 0) s.first_token_s = seconds_between(s.submitted, Clock::now());
      FinishReason end = FinishReason::none;
      for (const int32_t id : round.tokens) {
        ++generated;
        if (s.completion->append(tok.model_token_bytes(id), s.request.stop)) {
          end = FinishReason::stop;
          break;
        }
      }
      if (end == FinishReason::none && s.completion->completion_tokens() >= s.request.max_tokens)
        end = FinishReason::length;
      if (end != FinishReason::none) ending.emplace_back(&s, end);
    } catch (const std::exception& e) {
      retire(s, FinishReason::error, e.what());
    }
  }
  end_step(generated, prompt_tokens, stepped, ending);
}

void CompletionScheduler::retire(Stream& s, FinishReason reason, std::string error) {
  if (s.done) return;
  s.done = true;
  {
    // Counted before the completion ends, so a reader that sees it end sees it counted.
    const std::lock_guard lock(mutex_);
    switch (reason) {
      case FinishReason::length:
        ++counts_.finished_length;
        break;
      case FinishReason::stop:
        ++counts_.finished_stop;
        break;
      case FinishReason::cancelled:
        ++counts_.cancelled;
        break;
      case FinishReason::time_limit:
        ++counts_.timed_out;
        break;
      case FinishReason::error:
      case FinishReason::none:
        ++counts_.failed;
        break;
    }
    if (reason == FinishReason::length || reason == FinishReason::stop) {
      remember(latencies_, seconds_between(s.submitted, Clock::now()));
      if (s.first_token_s >= 0) remember(first_tokens_, s.first_token_s);
    }
  }
  s.completion->finish(reason, std::move(error));
}

}  // namespace shamn
