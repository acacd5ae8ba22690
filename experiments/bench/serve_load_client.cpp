// Load on a running `shamn serve`: C client threads, each sending completions
// (streamed, or whole with --no-stream) back to back for a fixed time; prints
// one JSON object with the server's generated tokens/s, requests/s and the
// p50/p99 of each request's latency (sent to last byte) and, streamed, time to
// first token. Requests that failed or ended other than by length or a stop
// string (an error, a time limit) are counted apart, not in the figures; the
// exit status is 1 if there were any.
//
// experiments/serve_load.py drives it (`--client`): a client in C++ spends a
// few microseconds a token where the Python one spends tens, so on a machine
// with two cores the server keeps more of them.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int port = 0;
  int clients = 1;
  double seconds = 10;
  int max_tokens = 64;
  bool stream = true;  // false: one JSON body a request, no events (no first-token time)
};

// The prompts and sampling of experiments/serve_load.py's Python client.
constexpr const char* kPrompts[] = {"The jury said", "It was a cold", "In the morning the",
                                    "He asked whether", "The committee"};

struct Outcome {
  double latency_s = 0;
  double first_s = -1;   // -1: no token event arrived
  bool ok = false;       // HTTP 200, finished by length or a stop string
  bool full = false;     // finished by length: max_tokens tokens generated
  bool stopped = false;  // finished by a stop string
};

Outcome one_request(const Options& opt, int64_t i) {
  nlohmann::json body = {{"prompt", kPrompts[i % std::size(kPrompts)]},
                         {"max_tokens", opt.max_tokens},
                         {"temperature", 0.8},
                         {"seed", i},
                         {"stream", opt.stream}};
  Outcome out;
  const Clock::time_point start = Clock::now();
  // An event may be split across reads: `tail` keeps the bytes after the last
  // complete event.
  std::string tail;
  bool done = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    tail.append(data, len);
    if (!opt.stream) return true;
    size_t pos = 0;
    for (size_t end; (end = tail.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
      const std::string_view event(tail.data() + pos, end - pos);
      if (event == "data: [DONE]") {
        done = true;
      } else if (event.starts_with("data: ")) {
        if (out.first_s < 0) out.first_s = std::chrono::duration<double>(Clock::now() - start).count();
        if (event.find("\"finish_reason\":\"length\"") != std::string_view::npos) out.full = true;
        if (event.find("\"finish_reason\":\"stop\"") != std::string_view::npos) out.stopped = true;
      }
    }
    tail.erase(0, pos);
    return true;
  };
  httplib::Client client("127.0.0.1", opt.port);
  client.set_read_timeout(300, 0);
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  out.latency_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!opt.stream) {
    done = true;
    out.full = tail.find("\"finish_reason\":\"length\"") != std::string::npos;
    out.stopped = tail.find("\"finish_reason\":\"stop\"") != std::string::npos;
  }
  out.ok = sent && res.status == 200 && done && (out.full || out.stopped);
  return out;
}

// NaN (JSON null) when there is nothing to rank.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Streamed-completion load on a running `shamn serve` (prints JSON)"};
  app.add_option("--port", opt.port, "the server's port on 127.0.0.1")
      ->required()
      ->check(CLI::Range(1, 65535));
  app.add_option("--clients", opt.clients, "concurrent clients")->check(CLI::Range(1, 4096));
  app.add_option("--seconds", opt.seconds, "how long each client keeps sending")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", opt.max_tokens, "max_tokens of each request")->check(CLI::Range(1, 1 << 20));
  app.add_flag("--stream,!--no-stream", opt.stream, "server-sent events (the default) or one body");
  CLI11_PARSE(app, argc, argv);

  std::mutex mu;
  std::vector<Outcome> outcomes;
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop_at =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds));
  std::vector<std::thread> threads;
  for (int k = 0; k < opt.clients; ++k)
    threads.emplace_back([&, k] {
      std::vector<Outcome> mine;
      for (int64_t i = k; Clock::now() < stop_at; i += opt.clients) mine.push_back(one_request(opt, i));
      const std::lock_guard lock(mu);
      outcomes.insert(outcomes.end(), mine.begin(), mine.end());
    });
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> latency, first;
  // An event holds whatever text came since the client's last read, so tokens
  // are not counted by events: a request finished by length generated max_tokens
  // (one ended by a stop string is counted in short_finish, without tokens).
  int64_t tokens = 0, failed = 0, short_finish = 0;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      ++failed;
      continue;
    }
    latency.push_back(o.latency_s);
    if (o.first_s >= 0) first.push_back(o.first_s);
    if (o.full)
      tokens += opt.max_tokens;
    else
      ++short_finish;
  }
  const auto ok = static_cast<double>(latency.size());
  const nlohmann::json report = {{"clients", opt.clients},
                                 {"requests", latency.size()},
                                 {"failed", failed},
                                 {"short_finish", short_finish},
                                 {"tokens", tokens},
                                 {"tok_s", static_cast<double>(tokens) / wall},
                                 {"req_s", ok / wall},
                                 {"latency_p50", quantile(latency, 0.5)},
                                 {"latency_p99", quantile(latency, 0.99)},
                                 {"first_p50", quantile(first, 0.5)},
                                 {"first_p99", quantile(first, 0.99)}};
  std::printf("%s\n", report.dump().c_str());
  return failed == 0 ? 0 : 1;
}
