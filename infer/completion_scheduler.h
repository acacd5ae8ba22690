#pragma once
// Continuous batching: many text completions decoded together, one forward pass
// over the weights per step for all of them (InferModel::forward over
// StreamSteps). A request waits in a bounded queue until the running batch has
// room; between steps the worker admits waiting requests, drops finished,
// cancelled and timed-out ones, and feeds every running stream its next token.
// A new stream's prompt goes through in chunks of at most prefill_chunk tokens
// per step, so a long prompt delays the other streams' next tokens by one chunk,
// not by the whole prompt. Each stream gets bitwise the logits it would get
// alone, so with the same seed its text is the text `shamn generate` prints.
//
// With a draft model (speculative decoding, infer/speculative.h) each stream
// instead advances by one draft-and-verify round per step, its own passes over
// both models, one stream after another; its text is then `shamn generate
// --draft`'s for the same seed.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "infer/infer_model.h"
#include "infer/sampler.h"

namespace shamn {

struct CompletionRequest {
  std::vector<int32_t> prompt;  // token ids < the model's vocabulary, at least one
  int64_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop;         // the text ends before the first of these it would contain
  double time_limit_s = 0;               // from submission; 0 = none
  const LoraAdapter* adapter = nullptr;  // a LoRA adapter of the model's base (null: the base alone)
};

enum class FinishReason { none, length, stop, cancelled, time_limit, error };
// The finish_reason of an OpenAI-style response: "length", "stop", or ours:
// "cancelled", "time_limit", "error".
const char* finish_reason_name(FinishReason r);

// One request's progress, shared by the worker (which appends) and the reader.
class Completion {
 public:
  struct Chunk {
    std::string text;  // new since the last take(); whole UTF-8 characters until the end
    FinishReason finished = FinishReason::none;
    std::string error;  // with FinishReason::error
  };
  // What wakes a reader waiting in take(): new text (a streamed response), or only
  // the end (a whole response, which then costs the worker no wake-up a token).
  enum class Wake { on_text, on_end };
  // Waits up to `wait` for new text (or only the end) and takes what there is.
  Chunk take(std::chrono::milliseconds wait, Wake wake = Wake::on_text);
  // Ends the completion at the next step (a client that went away).
  void cancel();

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;

 private:
  friend class CompletionScheduler;
  // Worker side: a sampled token's bytes. True when the text now contains a stop
  // string: it is cut before it, and the worker finishes the completion.
  bool append(const std::string& piece, const std::vector<std::string>& stop);
  void finish(FinishReason reason, std::string error = {});
  bool cancelled() const;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;     // generated so far (cut at a stop string)
  size_t released_ = 0;  // text_[0, released_) may be shown: no stop string can start there
  size_t taken_ = 0;     // text_[0, taken_) was handed out
  int64_t tokens_ = 0;
  int64_t prompt_tokens_ = 0;
  FinishReason finished_ = FinishReason::none;
  std::string error_;
  bool cancel_ = false;
  bool wake_on_text_ = true;  // the reader's last Wake: whether append() notifies
};

class CompletionScheduler {
 public:
  struct Options {
    int64_t max_batch = 16;             // streams decoded together
    int64_t max_queue = 64;             // requests waiting beyond those; more are refused
    int64_t prefill_chunk = 512;        // prompt tokens per stream and step
    const InferModel* draft = nullptr;  // speculative decoding (checked compatible by the caller)
    int64_t draft_tokens = 4;           // K: drafts per round
  };
  // The model needs a tokenizer (the text is its tokens' bytes).
  CompletionScheduler(const InferModel& model, Options options);
  // Ends every completion still running or waiting (as cancelled) and joins the
  // worker; later submissions are refused. The destructor does it too.
  void shutdown();
  ~CompletionScheduler();
  CompletionScheduler(const CompletionScheduler&) = delete;
  CompletionScheduler& operator=(const CompletionScheduler&) = delete;

  // Null when the queue is full (or after shutdown). The request must be valid (prompt non-empty,
  // ids in range, sampling validated): an InputError otherwise.
  std::shared_ptr<Completion> submit(CompletionRequest request);

  struct Stats {
    int64_t submitted = 0, rejected = 0;  // rejected: queue full
    int64_t finished_length = 0, finished_stop = 0, cancelled = 0, timed_out = 0, failed = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
    int64_t queued = 0, running = 0;
    // Over the last 1,000 finished requests, in seconds: submission to end, and
    // submission to the first generated token.
    double latency_p50 = 0, latency_p99 = 0, first_token_p50 = 0, first_token_p99 = 0;
  };
  Stats stats() const;

 private:
  struct Stream;
  void run();
  std::vector<std::unique_ptr<Stream>> admit_locked();
  void step();
  void speculative_step();
  // Counts the step's tokens, then ends the streams in `ending` and drops every ended one.
  void end_step(int64_t generated, int64_t prompt_tokens, bool stepped,
                const std::vector<std::pair<Stream*, FinishReason>>& ending);
  void retire(Stream& s, FinishReason reason, std::string error = {});

  const InferModel& model_;
  const Options options_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::unique_ptr<Stream>> queue_;
  std::vector<std::unique_ptr<Stream>> running_;  // the worker's alone
  // The worker's alone: a step's [streams, V] logits, kept between steps (at 64
  // streams a fresh 8 MB vector was zeroed every step: 3% of a loaded server's CPU).
  std::vector<float> step_logits_;
  int64_t running_count_ = 0;  // running_.size(), for stats()
  Stats counts_;
  std::deque<double> latencies_, first_tokens_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace shamn
