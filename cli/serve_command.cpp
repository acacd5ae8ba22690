// `shamn serve`: an HTTP server (cpp-httplib) for a model file, with the
// OpenAI-style POST /v1/completions (streamed as server-sent events on request)
// and GET /v1/models (the model and its LoRA adapters), vLLM's POST
// /v1/load_lora_adapter and /v1/unload_lora_adapter (with
// --allow-adapter-loading) and its tokenizer endpoints (POST /tokenize and
// /detokenize, GET /tokenizer_info), GET /health and GET /metrics (Prometheus text).
// Requests are decoded together by a CompletionScheduler (continuous
// batching); HTTP threads only parse, queue, and copy text out.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include "cli/adapter_json.h"
#include "cli/adapter_registry.h"
#include "cli/commands.h"
#include "cli/completion_request.h"
#include "cli/completion_response.h"
#include "cli/model_source.h"
#include "cli/shared_budget.h"
#include "cli/tokenizer_json.h"
#include "core/check.h"
#include "core/heap_policy.h"
#include "core/kernel_level.h"
#include "core/parallel.h"
#include "infer/completion_scheduler.h"
#include "infer/infer_model.h"
#include "infer/lora_adapter.h"
#include "infer/speculative.h"
#include "train/stop_signal.h"

// Last: it pulls in <resolv.h>, whose `_res` macro breaks Eigen's headers.
#include <httplib.h>

namespace shamn::cli {

namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", kernel, draft;
  std::vector<std::string> adapter_specs;    // NAME=FILE
  std::vector<std::string> allowed_origins;  // CORS: web pages that may call from a browser ("*": any)
  bool allow_adapter_loading = false;        // POST /v1/load_lora_adapter and /v1/unload_lora_adapter
  int64_t max_adapters = AdapterRegistry::kDefaultMaxAdapters;
  int port = 8080;
  int64_t stream_interval = 1;  // tokens per server-sent event (after the first)
  CompletionScheduler::Options batching;
  ServeLimits limits;
};

using namespace std::chrono_literals;

// n x max_tokens x (logprobs + 1) stays far inside int64.
constexpr int64_t kMostTokensLimit = int64_t{1} << 40;
constexpr int64_t kMostLogprobValues = int64_t{1} << 50;

// How often a waiting response writes to its client: a write to a client that
// went away fails, and that is how a disconnect is noticed and the request cancelled.
constexpr auto kHeartbeat = 500ms;

// What requests and /v1/models call the model: its file's name.
std::string model_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Server {
 public:
  Server(const ServeArgs& a, const InferModel& model, AdapterRegistry& adapters)
      : args_(a),
        model_(model),
        adapters_(adapters),
        scheduler_(model, a.batching),
        logprob_values_(a.limits.max_logprob_values_in_flight),
        name_(model_name(a.model)),
        started_(unix_seconds()) {
    // Every client waits in a thread of its own while its request runs: enough
    // threads for a full batch, a full queue and a few refused or probing clients.
    const size_t threads = static_cast<size_t>(a.batching.max_batch + a.batching.max_queue + 8);
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_socket_ = sock;
    });
    http_.set_payload_max_length(1 << 20);
    http_.set_read_timeout(30, 0);
    http_.set_write_timeout(30, 0);
    http_.Post("/v1/completions",
               [this](const httplib::Request& req, httplib::Response& res) { complete(req, res); });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { models(res); });
    http_.Post("/v1/load_lora_adapter", [this](const httplib::Request& req, httplib::Response& res) {
      change_adapters(req, res, true);
    });
    http_.Post("/v1/unload_lora_adapter", [this](const httplib::Request& req, httplib::Response& res) {
      change_adapters(req, res, false);
    });
    // vLLM's tokenizer endpoints (lm-evaluation-harness scores prompts through them).
    http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      answer_json(
          res, [&] { return tokenize_json(req.body, *model_.tokenizer(), args_.limits.max_prompt_tokens); });
    });
    http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      answer_json(res, [&] { return detokenize_json(req.body, *model_.tokenizer(), model_.vocab_size()); });
    });
    http_.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          tokenizer_info_json(*model_.tokenizer(), model_.vocab_size(), args_.limits.max_prompt_tokens),
          "application/json");
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { metrics(res); });
    if (!a.allowed_origins.empty()) allow_origins();
    http_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? "no such endpoint"
                                  : res.status == 413 ? "the body is larger than 1 MiB"
                                                      : "bad request";
      res.set_content(error_json(message, "invalid_request_error"), "application/json");
    });
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      res.status = 500;
      res.set_content(error_json("internal error", "server_error"), "application/json");
    });
  }

  // CORS, for --allow-origin: a browser's preflight OPTIONS gets 204 with what
  // may be sent, and every answer to an allowed origin says so (to any, "*").
  // Without the flag, a page of another origin cannot read the answers.
  void allow_origins() {
    const std::vector<std::string>& allowed = args_.allowed_origins;
    const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
    http_.Options(R"(/.*)", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      // The headers the page's request will carry (OpenAI's JS client sends its
      // own X-Stainless-* ones): all of them, where they are header names.
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      const bool names = asked.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "-_, ") == std::string::npos;
      res.set_header("Access-Control-Allow-Headers",
                     !asked.empty() && names ? asked : std::string("Content-Type, Authorization"));
      res.set_header("Access-Control-Max-Age", "600");
    });
    http_.set_post_routing_handler([&allowed, any](const httplib::Request& req, httplib::Response& res) {
      if (any) return res.set_header("Access-Control-Allow-Origin", "*");
      res.set_header("Vary", "Origin");
      const std::string origin = req.get_header_value("Origin");
      if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end())
        res.set_header("Access-Control-Allow-Origin", origin);
    });
  }

  // Binds, prints the address, and serves until SIGINT or SIGTERM.
  void run() {
    const int port = args_.port == 0 ? http_.bind_to_any_port(args_.host)
                                     : (http_.bind_to_port(args_.host, args_.port) ? args_.port : -1);
    SHAMN_INPUT_CHECK(port > 0, "cannot listen on ", args_.host, ":", args_.port,
                      " (in use, or not an address of this machine)");
    // cpp-httplib listens with a backlog of 5, compiled into Debian's library:
    // a burst of clients arriving at once (the serving test's 20) overflowed it
    // on a loaded machine, and a connection was reset. Linux takes a second
    // listen() on the bound socket as a new backlog.
    if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
    const std::string draft = args_.batching.draft ? ", draft " + model_name(args_.draft) + " K " +
                                                         std::to_string(args_.batching.draft_tokens)
                                                   : "";
    std::printf(
        "shamn serve: listening on http://%s:%d (model %s%s, batch %lld, queue %lld, %d threads, kernel "
        "%s)\n",
        args_.host.c_str(), port, name_.c_str(), draft.c_str(),
        static_cast<long long>(args_.batching.max_batch), static_cast<long long>(args_.batching.max_queue),
        num_threads(), kernel_level_name(kernel_level()));
    std::fflush(stdout);
    const StopSignal stop("\nshamn serve: stopping: open requests end as cancelled (signal again to kill)\n");
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      while (!done.load() && !stop.requested()) std::this_thread::sleep_for(50ms);
      // Every request ends first (as cancelled), so no connection holds the server open.
      scheduler_.shutdown();
      http_.stop();
      // But a client still sending its request holds a worker in a read that only
      // the read timeout ends, and each byte it sends starts that again: after a
      // grace the server ends without it (none of its work had begun).
      const auto deadline = std::chrono::steady_clock::now() + kShutdownGrace;
      while (!done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
      if (done.load()) return;
      say_stopped();
      std::_Exit(0);
    });
    http_.listen_after_bind();
    done = true;
    watcher.join();
    say_stopped();
  }

 private:
  static constexpr std::chrono::seconds kShutdownGrace{5};

  void say_stopped() {
    const CompletionScheduler::Stats s = scheduler_.stats();
    std::printf("shamn serve: stopped (%lld requests, %lld tokens generated)\n",
                static_cast<long long>(s.submitted), static_cast<long long>(s.generated_tokens));
    std::fflush(stdout);
  }

  // The JSON `make` writes, or 400 with the RequestError it throws.
  template <class Make>
  static void answer_json(httplib::Response& res, Make make) {
    try {
      res.set_content(make(), "application/json");
    } catch (const RequestError& e) {
      res.status = 400;
      res.set_content(error_json(e.what(), "invalid_request_error"), "application/json");
    }
  }

  // One choice of a request while it runs: its completion, and the prompt's text
  // where echoed (sent before the first generated text).
  struct Choice {
    std::shared_ptr<Completion> completion;
    std::string echo;
    bool logprobs = false;
    bool counts_prompt = true;  // the first of its prompt's best_of: usage counts each prompt once
    std::shared_ptr<const void> logprob_share;  // the request's logprobs values, held until its response ends
  };
  using Choices = std::vector<Choice>;

  void complete(const httplib::Request& req, httplib::Response& res) {
    const auto refuse = [&res](int status, const char* type, const std::string& message) {
      res.status = status;
      res.set_content(error_json(message, type), "application/json");
    };
    ParsedCompletion parsed;
    try {
      parsed = parse_completion_request(req.body, *model_.tokenizer(), model_.vocab_size(), args_.limits);
    } catch (const RequestError& e) {
      return refuse(400, "invalid_request_error", e.what());
    }
    if (args_.batching.draft && parsed.best_of > parsed.n)
      return refuse(400, "invalid_request_error",
                    "best_of other than n ranks candidates by their log-probabilities, which speculative "
                    "decoding (--draft) does not keep");
    // A request picks an adapter by "adapter", or by "model" as vLLM's clients
    // do; a model that is neither the base nor an adapter is refused (a
    // client asking for an unloaded adapter must not get the base's text).
    std::shared_ptr<const LoraAdapter> by_model = adapters_.find(parsed.model);
    if (!parsed.model.empty() && parsed.model != name_ && !by_model)
      return refuse(404, "not_found_error",
                    "the model '" + parsed.model + "' does not exist; this server has '" + name_ +
                        "' and the adapters " + adapters_.names() + " (GET /v1/models)");
    if (by_model && !parsed.adapter.empty() && parsed.adapter != parsed.model)
      return refuse(
          400, "invalid_request_error",
          "model names the adapter '" + parsed.model + "' but adapter names '" + parsed.adapter + "'");
    if (parsed.adapter.empty() && by_model) parsed.adapter = parsed.model;
    std::shared_ptr<const LoraAdapter> adapter;
    if (!parsed.adapter.empty()) {
      adapter = by_model ? std::move(by_model) : adapters_.find(parsed.adapter);
      if (!adapter)  // 404 as for an unknown "model": the same name by either field gets the same answer
        return refuse(404, "not_found_error",
                      "unknown adapter '" + parsed.adapter + "'; this server has " + adapters_.names());
    }
    // More completions than the batch and queue hold would be refused as busy
    // however long the client waited.
    const int64_t room = args_.batching.max_batch + args_.batching.max_queue;
    if (static_cast<int64_t>(parsed.requests.size()) > room)
      return refuse(400, "invalid_request_error",
                    "the request asks for " + std::to_string(parsed.requests.size()) +
                        " completions (prompts times best_of, which is n when absent); this server holds " +
                        std::to_string(room) + " at once (--max-batch + --max-queue)");
    // A response's logprobs are built in memory: the server holds at most
    // --max-logprob-values-in-flight of them, counted at their most.
    std::shared_ptr<const void> logprob_share = logprob_values_.take(parsed.logprob_values);
    if (!logprob_share) {
      logprob_refusals_.fetch_add(static_cast<int64_t>(parsed.requests.size()));
      return refuse(
          429, "server_busy",
          "the server is busy: the request's " + std::to_string(parsed.logprob_values) + " logprobs values" +
              (parsed.best_of > parsed.n ? " (best_of scores every candidate's tokens)" : "") +
              " with those of the requests it is answering would pass " +
              std::to_string(logprob_values_.limit()) + " (--max-logprob-values-in-flight); retry later");
    }
    Choices choices;
    for (CompletionRequest& r : parsed.requests) {
      r.adapter = adapter.get();
      r.keep_alive = adapter;  // an unload waits for this request to end
      choices.push_back({nullptr, parsed.echo ? model_.tokenizer()->model_text(r.prompt) : std::string(),
                         parsed.logprobs, static_cast<int64_t>(choices.size()) % parsed.best_of == 0,
                         logprob_share});
    }
    // All of a request's completions are queued or none: a refusal leaves
    // nothing running that its client will not read.
    std::vector<std::shared_ptr<Completion>> submitted;
    try {
      submitted = scheduler_.submit_all(std::move(parsed.requests));
    } catch (const InputError& e) {  // what only the scheduler knows (a draft model) or parsing let through
      return refuse(400, "invalid_request_error", e.what());
    }
    if (submitted.empty())
      return refuse(429, "server_busy",
                    "the server is busy: every batch slot and queue place is taken; retry later");
    for (size_t i = 0; i < choices.size(); ++i) choices[i].completion = std::move(submitted[i]);
    if (!parsed.adapter.empty())
      for (size_t i = 0; i < choices.size(); ++i) adapters_.count_request(parsed.adapter);
    // The response names the adapter that ran, as /v1/models lists it.
    const CompletionId id{"cmpl-" + std::to_string(next_id_.fetch_add(1)), unix_seconds(),
                          parsed.adapter.empty() ? name_ : parsed.adapter};
    const Tokenizer& tok = *model_.tokenizer();
    // HTTP/1.0 has no chunked encoding: its client reads the body to the close,
    // or, where it keeps the connection (httplib's own test of the header), by its length.
    const bool chunked = req.version != "HTTP/1.0";
    if (!chunked && req.get_header_value("Connection") == "Keep-Alive")
      respond_with_length(res, choices, id, parsed, tok);
    else if (parsed.stream)
      stream(res, chunked, choices.front(), id, Completion::Wake::every(args_.stream_interval),
             parsed.stream_usage, tok);
    else
      respond_whole(res, chunked, std::move(choices), id, parsed.best_of, parsed.n, tok);
  }

  static void provide(httplib::Response& res, bool chunked, const char* type,
                      httplib::ContentProviderWithoutLength provider,
                      httplib::ContentProviderResourceReleaser releaser) {
    if (chunked)
      res.set_chunked_content_provider(type, std::move(provider), std::move(releaser));
    else
      res.set_content_provider(type, std::move(provider), std::move(releaser));
  }

  // What a take() adds to choice `index`: the echo first where it is still to send.
  static CompletionChoice choice_part(const CompletionId& id, int64_t index, Completion::Chunk chunk,
                                      const Choice& c, bool first) {
    // A model error reaches the operator's log as well as the client.
    if (chunk.finished == FinishReason::error)
      std::fprintf(stderr, "shamn serve: %s (choice %lld) failed: %s\n", id.id.c_str(),
                   static_cast<long long>(index), chunk.error.c_str());
    CompletionChoice out;
    out.index = index;
    out.text = first ? c.echo + chunk.text : std::move(chunk.text);
    out.finish = chunk.finished;
    out.with_logprobs = c.logprobs;
    out.logprobs = std::move(chunk.logprobs);
    out.error = std::move(chunk.error);
    return out;
  }

  // Server-sent events: one per `wake` tokens of text, the last with the finish
  // reason (then the usage alone, where asked), then "[DONE]". A comment line keeps
  // a waiting client's connection tested.
  static void stream(httplib::Response& res, bool chunked, Choice choice, CompletionId id,
                     Completion::Wake wake, bool usage, const Tokenizer& tok) {
    res.set_header("Cache-Control", "no-cache");
    const std::shared_ptr<Completion> completion = choice.completion;
    auto first = std::make_shared<bool>(true);
    provide(
        res, chunked, "text/event-stream",
        [choice, id, wake, usage, &tok, first](size_t, httplib::DataSink& sink) {
          Completion::Chunk c = choice.completion->take(kHeartbeat, wake);
          const bool end = c.finished != FinishReason::none;
          const bool data = !c.text.empty() || !c.logprobs.empty() || end;
          const std::string out = data ? events(id, choice_part(id, 0, std::move(c), choice, *first),
                                                *choice.completion, usage, tok)
                                       : std::string(": waiting\n\n");
          if (data) *first = false;
          if (!sink.write(out.data(), out.size())) {
            choice.completion->cancel();
            return false;
          }
          if (end) sink.done();
          return true;
        },
        [completion](bool) { completion->cancel(); });  // a no-op once finished
  }

  // The server-sent events of one take() with something to say: its text, and at
  // the end the usage where asked and "[DONE]".
  static std::string events(const CompletionId& id, const CompletionChoice& part,
                            const Completion& completion, bool usage, const Tokenizer& tok) {
    const bool end = part.finish != FinishReason::none;
    std::string out = "data: " + completion_chunk_json(id, part, tok) + "\n\n";
    if (end && usage)
      out += "data: " + usage_chunk_json(id, completion.prompt_tokens(), completion.completion_tokens()) +
             "\n\n";
    if (end) out += "data: [DONE]\n\n";
    return out;
  }

  // The whole body of a response whose choices have all ended: with best_of,
  // the n likeliest of each prompt's candidates (the usage counts every
  // candidate's tokens, as each was generated).
  static std::string whole_json(const CompletionId& id, const Choices& choices,
                                std::vector<CompletionChoice> parts, int64_t best_of, int64_t n,
                                const Tokenizer& tok) {
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (const Choice& c : choices) {
      if (c.counts_prompt) prompt_tokens += c.completion->prompt_tokens();
      completion_tokens += c.completion->completion_tokens();
    }
    return completion_json(id, choose_best_of(std::move(parts), best_of, n), prompt_tokens, completion_tokens,
                           tok) +
           "\n";
  }

  // An HTTP/1.0 client that asks to keep its connection needs the body's length
  // (cpp-httplib closes only the HTTP/1.0 connections that did not ask), so the
  // body is made whole first: a stream's events arrive at once, and a client
  // that leaves meanwhile is not noticed (max_tokens and --time-limit bound it).
  static void respond_with_length(httplib::Response& res, const Choices& choices, const CompletionId& id,
                                  const ParsedCompletion& request, const Tokenizer& tok) {
    std::vector<CompletionChoice> parts;
    for (const Choice& c : choices) {
      Completion::Chunk whole;
      do {
        Completion::Chunk part = c.completion->take(kHeartbeat, Completion::Wake::on_end());
        whole.text += part.text;
        for (TokenLogprob& e : part.logprobs) whole.logprobs.push_back(std::move(e));
        whole.finished = part.finished;
        whole.error = std::move(part.error);
      } while (whole.finished == FinishReason::none);
      parts.push_back(choice_part(id, static_cast<int64_t>(parts.size()), std::move(whole), c, true));
    }
    const auto body = std::make_shared<const std::string>(
        request.stream ? events(id, parts.front(), *choices.front().completion, request.stream_usage, tok)
                       : whole_json(id, choices, std::move(parts), request.best_of, request.n, tok));
    // The request's logprobs share is held until the body is sent: a slow
    // reader's body counts against --max-logprob-values-in-flight.
    res.set_content_provider(
        body->size(), request.stream ? "text/event-stream" : "application/json",
        [body, share = choices.front().logprob_share](size_t offset, size_t length, httplib::DataSink& sink) {
          return sink.write(body->data() + offset, length);
        });
  }

  // One JSON body once every choice has ended. Until then the body is leading
  // white space (valid JSON) written every heartbeat: a client that went away
  // fails the write. The handler's thread sleeps until an end or the heartbeat,
  // not a wake-up a token.
  static void respond_whole(httplib::Response& res, bool chunked, Choices choices, CompletionId id,
                            int64_t best_of, int64_t n, const Tokenizer& tok) {
    struct Progress {
      Choices choices;
      std::vector<CompletionChoice> parts;  // of the choices that ended, in order
    };
    auto p = std::make_shared<Progress>();
    p->choices = std::move(choices);
    provide(
        res, chunked, "application/json",
        [p, id, best_of, n, &tok](size_t, httplib::DataSink& sink) {
          while (p->parts.size() < p->choices.size()) {
            const Choice& c = p->choices[p->parts.size()];
            // Wake::on_end() gives no text before the end, and all of it then.
            Completion::Chunk chunk = c.completion->take(kHeartbeat, Completion::Wake::on_end());
            if (chunk.finished == FinishReason::none) {
              if (!sink.write(" ", 1)) {
                for (const Choice& each : p->choices) each.completion->cancel();
                return false;
              }
              return true;
            }
            p->parts.push_back(
                choice_part(id, static_cast<int64_t>(p->parts.size()), std::move(chunk), c, true));
          }
          const std::string body = whole_json(id, p->choices, std::move(p->parts), best_of, n, tok);
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        [p](bool) {
          for (const Choice& each : p->choices) each.completion->cancel();
        });
  }

  void models(httplib::Response& res) {
    res.set_content(models_json(name_, started_, adapters_.list()), "application/json");
  }

  // POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
  // /v1/unload_lora_adapter {"lora_name"}, as vLLM has them: only with
  // --allow-adapter-loading, since a client then names files for the server to read.
  void change_adapters(const httplib::Request& req, httplib::Response& res, bool loading) {
    const auto refuse = [&res](int status, const char* type, const std::string& message) {
      res.status = status;
      res.set_content(error_json(message, type), "application/json");
    };
    if (!args_.allow_adapter_loading)
      return refuse(403, "permission_error",
                    "loading and unloading adapters is off: start shamn serve with --allow-adapter-loading");
    AdapterRequest r;
    try {
      r = parse_adapter_request(req.body, loading);
    } catch (const RequestError& e) {
      return refuse(400, "invalid_request_error", e.what());
    }
    if (loading) {
      try {
        adapters_.check_name(r.name);
      } catch (const InputError& e) {
        return refuse(400, "invalid_request_error", std::string("lora_name: ") + e.what());
      }
      try {
        adapters_.load(r.name, r.path);
      } catch (const InputError& e) {
        return refuse(400, "invalid_request_error",
                      "cannot load lora_path '" + r.path + "' as adapter '" + r.name + "': " + e.what());
      }
    } else if (!adapters_.unload(r.name)) {
      return refuse(404, "not_found_error",
                    "no adapter named '" + r.name + "' is loaded; this server has " + adapters_.names());
    }
    res.set_content(adapter_status_json(r.name, loading), "application/json");
  }

  void health(httplib::Response& res) {
    const CompletionScheduler::Stats s = scheduler_.stats();
    res.set_content("{\"status\":\"ok\",\"model\":\"" + name_ + "\",\"running\":" +
                        std::to_string(s.running) + ",\"queued\":" + std::to_string(s.queued) + "}",
                    "application/json");
  }

  // Prometheus' text format.
  void metrics(httplib::Response& res) {
    const CompletionScheduler::Stats s = scheduler_.stats();
    std::string out, last;
    // A metric's HELP and TYPE once, before its first sample.
    auto line = [&out, &last](const std::string& name, const std::string& help, const char* type,
                              double value, const std::string& labels = "") {
      if (name != last) out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      last = name;
      char value_text[64];
      std::snprintf(value_text, sizeof(value_text), "%.9g", value);
      out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + value_text + "\n";
    };
    const auto d = [](int64_t v) { return static_cast<double>(v); };
    line("shamn_requests_total", "completions accepted (a request of several prompts or n counts each)",
         "counter", d(s.submitted));
    for (const auto& [name, count] : adapters_.request_counts())
      line("shamn_adapter_requests_total", "completions accepted, by the LoRA adapter they picked", "counter",
           d(count), "adapter=\"" + name + "\"");
    line("shamn_requests_rejected_total",
         "completions refused with 429 (batch and queue full; a request counts each)", "counter",
         d(s.rejected));
    line("shamn_requests_rejected_logprob_values_total",
         "completions refused with 429 for --max-logprob-values-in-flight", "counter",
         d(logprob_refusals_.load()));
    const std::string finished = "requests ended, by finish reason";
    line("shamn_requests_finished_total", finished, "counter", d(s.finished_length), "reason=\"length\"");
    line("shamn_requests_finished_total", finished, "counter", d(s.finished_stop), "reason=\"stop\"");
    line("shamn_requests_finished_total", finished, "counter", d(s.cancelled), "reason=\"cancelled\"");
    line("shamn_requests_finished_total", finished, "counter", d(s.timed_out), "reason=\"time_limit\"");
    line("shamn_requests_finished_total", finished, "counter", d(s.failed), "reason=\"error\"");
    line("shamn_prompt_tokens_total", "prompt tokens run through the model", "counter", d(s.prompt_tokens));
    line("shamn_generated_tokens_total", "tokens generated", "counter", d(s.generated_tokens));
    line("shamn_batch_steps_total", "forward passes of the running batch", "counter", d(s.steps));
    line("shamn_queue_depth", "requests waiting for a batch slot", "gauge", d(s.queued));
    line("shamn_running_streams", "requests in the running batch", "gauge", d(s.running));
    line("shamn_logprob_values_in_flight",
         "logprobs values the requests being answered may return (--max-logprob-values-in-flight)", "gauge",
         d(logprob_values_.held()));
    const std::string latency = "seconds from a request's arrival to its end (last 1000 finished)";
    line("shamn_request_latency_seconds", latency, "summary", s.latency_p50, "quantile=\"0.5\"");
    line("shamn_request_latency_seconds", latency, "summary", s.latency_p99, "quantile=\"0.99\"");
    const std::string first = "seconds from a request's arrival to its first token (last 1000 finished)";
    line("shamn_first_token_seconds", first, "summary", s.first_token_p50, "quantile=\"0.5\"");
    line("shamn_first_token_seconds", first, "summary", s.first_token_p99, "quantile=\"0.99\"");
    res.set_content(out, "text/plain; version=0.0.4");
  }

  const ServeArgs& args_;
  const InferModel& model_;
  AdapterRegistry& adapters_;
  CompletionScheduler scheduler_;
  SharedBudget logprob_values_;               // of the requests being answered, each at its most
  std::atomic<int64_t> logprob_refusals_{0};  // completions refused for it
  const std::string name_;
  const int64_t started_;  // Unix seconds: the models' "created"
  std::atomic<int64_t> next_id_{1};
  httplib::Server http_;
  socket_t listen_socket_ = -1;  // the server's socket, as set_socket_options sees it
};

void run_serve(const ServeArgs& a) {
  // Responses come in bursts on many HTTP threads, and glibc gives each of
  // them one of up to 8 arenas a core: under keep_freed_memory_in_process each
  // arena kept its burst (80 scored 8k prompts took a 2-core server to about
  // 3.3x the peak RSS it has with this). Measured in experiments/serving.md (stop 86).
  keep_at_most_freed_per_arena(4 << 20);
  apply_kernel_flag(a.kernel);
  SHAMN_INPUT_CHECK(a.port >= 0 && a.port <= 65535, "--port ", a.port,
                    " must lie in [0, 65535] (0: any free port)");
  SHAMN_INPUT_CHECK(a.batching.max_batch >= 1 && a.batching.max_batch <= 1024, "--max-batch ",
                    a.batching.max_batch, " must lie in [1, 1024]");
  SHAMN_INPUT_CHECK(a.batching.max_queue >= 0 && a.batching.max_queue <= 4096, "--max-queue ",
                    a.batching.max_queue, " must lie in [0, 4096]");
  SHAMN_INPUT_CHECK(a.batching.prefill_chunk >= 1, "--prefill-chunk must be >= 1");
  SHAMN_INPUT_CHECK(a.stream_interval >= 1 && a.stream_interval <= 1024, "--stream-interval ",
                    a.stream_interval, " must lie in [1, 1024]");
  SHAMN_INPUT_CHECK(a.limits.max_tokens >= 0 && a.limits.max_tokens <= kMostTokensLimit,
                    "--max-tokens-limit ", a.limits.max_tokens, " must lie in [0, ", kMostTokensLimit, "]");
  SHAMN_INPUT_CHECK(a.limits.max_logprob_values >= 1, "--max-logprob-values must be >= 1");
  SHAMN_INPUT_CHECK(a.limits.max_logprob_values_in_flight <= kMostLogprobValues,
                    "--max-logprob-values-in-flight ", a.limits.max_logprob_values_in_flight,
                    " must be <= ", kMostLogprobValues);
  SHAMN_INPUT_CHECK(a.limits.max_logprob_values_in_flight >= a.limits.max_logprob_values,
                    "--max-logprob-values-in-flight ", a.limits.max_logprob_values_in_flight,
                    " must be >= --max-logprob-values ", a.limits.max_logprob_values,
                    " (a request at that limit could never run)");
  SHAMN_INPUT_CHECK(a.limits.max_prompt_tokens >= 1, "--max-prompt-tokens must be >= 1");
  SHAMN_INPUT_CHECK(a.limits.time_limit_s >= 0, "--time-limit must be >= 0 (0: none)");
  SHAMN_INPUT_CHECK(a.batching.draft_tokens >= 1 && a.batching.draft_tokens <= kMaxDraftTokens,
                    "--draft-tokens ", a.batching.draft_tokens, " must be in [1, ", kMaxDraftTokens, "]");
  const InferModel model(ShqFile::open(a.model));
  SHAMN_INPUT_CHECK(model.tokenizer().has_value(), "model file '", a.model,
                    "' has no tokenizer: re-export it with --tokenizer PATH");
  std::optional<InferModel> draft;
  ServeArgs args = a;
  if (!a.draft.empty()) {
    draft.emplace(ShqFile::open(a.draft));
    check_draft_compatible(model, a.model, *draft, a.draft);
    args.batching.draft = &*draft;
  }
  AdapterRegistry adapters(model, model_name(a.model), a.max_adapters);
  for (const std::string& spec : a.adapter_specs) {
    const size_t eq = spec.find('=');
    const std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    SHAMN_INPUT_CHECK(plain_adapter_name(name) && eq + 1 < spec.size(), "--adapter '", spec,
                      "' must be NAME=FILE (a name of 1 to 64 letters, digits, '.', '_' or '-')");
    SHAMN_INPUT_CHECK(!adapters.find(name), "--adapter: the name '", name, "' is given twice");
    adapters.load(name, spec.substr(eq + 1));
  }
  Server server(args, model, adapters);
  server.run();
}

}  // namespace

// An origin as browsers send it: scheme://host[:port], nothing after; it goes
// into a response header, so nothing but the characters of a host either.
CLI::Validator origin_check() {
  return CLI::Validator(
      [](const std::string& origin) -> std::string {
        if (origin == "*") return "";
        constexpr const char* kLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        const size_t at = origin.find("://");
        const std::string scheme = origin.substr(0, at),
                          host = at == std::string::npos ? "" : origin.substr(at + 3);
        const bool ok =
            !scheme.empty() && scheme.find_first_not_of(kLetters) == std::string::npos && !host.empty() &&
            host.find_first_not_of(std::string(kLetters) + "0123456789-.:[]") == std::string::npos;
        return ok ? ""
                  : "'" + origin + "' is not an origin: scheme://host[:port] (http://localhost:3000), or *";
      },
      "ORIGIN");
}

void register_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "serve a model over HTTP (OpenAI-style /v1/completions)");
  c->add_option("model", a->model, "model file (.shq, with a tokenizer; not a checkpoint: export it first)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--host", a->host, "address to listen on (loopback by default)")->capture_default_str();
  c->add_option("--port", a->port, "port (0: any free one, printed at start)")->capture_default_str();
  c->add_option("--max-batch", a->batching.max_batch, "requests decoded together")->capture_default_str();
  c->add_option("--max-queue", a->batching.max_queue, "requests waiting beyond the batch; more get 429")
      ->capture_default_str();
  c->add_option("--prefill-chunk", a->batching.prefill_chunk, "prompt tokens per request and step")
      ->capture_default_str();
  c->add_option("--stream-interval", a->stream_interval,
                "streamed responses: an event every N tokens after the first (fewer wake-ups and writes "
                "on a loaded server, at up to N - 1 steps of latency)")
      ->capture_default_str();
  c->add_option("--max-tokens-limit", a->limits.max_tokens, "the largest max_tokens a request may ask for")
      ->capture_default_str();
  c->add_option("--max-prompt-tokens", a->limits.max_prompt_tokens, "the longest prompt, in tokens")
      ->capture_default_str();
  c->add_option("--max-logprob-values", a->limits.max_logprob_values,
                "the most logprobs values one response may hold: tokens scored x (alternatives + 1)")
      ->capture_default_str();
  c->add_option("--max-logprob-values-in-flight", a->limits.max_logprob_values_in_flight,
                "the same over every request being answered, each counted at its most (bounds the memory "
                "that scoring takes; a request past it gets 429)")
      ->capture_default_str();
  c->add_option("--time-limit", a->limits.time_limit_s,
                "seconds a request may take, queue included (0: none)")
      ->capture_default_str();
  c->add_option("--draft", a->draft,
                "speculative decoding: a smaller model file (.shq) with the same vocabulary drafts for every "
                "request (each request then decodes on its own, round by round)")
      ->check(CLI::ExistingFile);
  c->add_option("--draft-tokens", a->batching.draft_tokens,
                "with --draft: tokens drafted per verification (K)")
      ->capture_default_str();
  c->add_option("--kernel", a->kernel, "scalar, avx2 or avx512 (default: the CPU's best)");
  c->add_option("--allow-origin", a->allowed_origins,
                "ORIGIN (scheme://host[:port], or * for any): a web page there may call the server from a "
                "browser (CORS; repeat for several; none by default)")
      ->check(origin_check());
  c->add_option(
      "--adapter", a->adapter_specs,
      "NAME=FILE: a LoRA adapter file for the model (shamn export ADAPTER.h5 --base ...); a request "
      "picks it with \"adapter\": \"NAME\" or \"model\": \"NAME\", and GET /v1/models lists them "
      "(repeat for several; requests with different adapters and none share one batch)");
  c->add_option("--max-adapters", a->max_adapters,
                "the most adapters loaded at once, from --adapter and loads while it serves (a load past it "
                "is refused until one is unloaded)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  c->add_flag(
      "--allow-adapter-loading", a->allow_adapter_loading,
      "let clients load and unload adapters by file path while the server runs (POST "
      "/v1/load_lora_adapter {\"lora_name\", \"lora_path\"}, /v1/unload_lora_adapter {\"lora_name\"}; "
      "requests running with an unloaded adapter finish with it)");
  c->callback([a] { run_serve(*a); });
}

}  // namespace shamn::cli
