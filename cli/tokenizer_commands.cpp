// `shamn tokenizer train|encode|decode` and `shamn prepare`: the byte-level BPE
// tokenizer (data/tokenizer.h) and the train/val token files (data/prepare.h).
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cli/commands.h"
#include "core/check.h"
#include "core/read_file.h"
#include "core/timing.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace shamn::cli {

namespace {

struct TrainArgs {
  std::string input, out;
  int64_t vocab = 8192;
};

struct CodecArgs {
  std::string tokenizer, input;  // input empty: stdin
};

struct PrepareArgs {
  std::string input, tokenizer, out;
  double val_fraction = 0.05;
};

std::string source_name(const std::string& path) { return path.empty() ? "<stdin>" : path; }

// The whole file, or stdin when `path` is empty, as raw bytes.
std::string read_input(const std::string& path) {
  std::string data;
  if (path.empty()) {
    char buf[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof(buf), stdin)) > 0) data.append(buf, got);
    SHAMN_INPUT_CHECK(!std::ferror(stdin), "reading stdin failed");
    return data;
  }
  return read_whole_file(path, "input", PipePolicy::allow);
}

// Output that did not all reach stdout (a full disk, /dev/full, a closed pipe) is an
// error: a truncated ids.txt must not exit 0.
void write_stdout(const std::string& bytes) {
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  const bool flushed = std::fflush(stdout) == 0;
  SHAMN_INPUT_CHECK(written == bytes.size() && flushed && !std::ferror(stdout),
                    "writing to standard output failed: ", std::strerror(errno));
}

bool is_separator(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

double ratio(int64_t bytes, int64_t tokens) {
  return tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0;
}

void run_train(const TrainArgs& a) {
  const std::string text = read_input(a.input);
  SHAMN_INPUT_CHECK(!text.empty(), "'", a.input, "' is empty: no text to learn merges from");
  Stopwatch clock;
  const Tokenizer tok = Tokenizer::train(text, a.vocab);
  const double train_s = clock.seconds();
  tok.save(a.out);
  clock.restart();
  const int64_t tokens = static_cast<int64_t>(tok.encode(text).size());
  const double encode_s = clock.seconds();
  const int64_t bytes = static_cast<int64_t>(text.size());
  std::printf("wrote %s: vocab %" PRId64 "%s\n", a.out.c_str(), tok.vocab_size(),
              tok.vocab_size() < a.vocab ? " (the text ran out of pairs to merge)" : "");
  std::printf("trained on %" PRId64 " bytes in %.2f s; encoded back into %" PRId64
              " tokens in %.2f s: %.3f bytes/token\n",
              bytes, train_s, tokens, encode_s, ratio(bytes, tokens));
}

void run_encode(const CodecArgs& a) {
  const Tokenizer tok = Tokenizer::load(a.tokenizer);
  const std::vector<uint32_t> ids = tok.encode(read_input(a.input));
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  out += '\n';
  write_stdout(out);
}

void run_decode(const CodecArgs& a) {
  const Tokenizer tok = Tokenizer::load(a.tokenizer);
  const std::string text = read_input(a.input);
  const std::string source = source_name(a.input);
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < text.size();) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    const size_t start = i;
    uint64_t id = 0;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i)
      if (id <= static_cast<uint64_t>(kMaxVocabSize)) id = id * 10 + static_cast<uint64_t>(text[i] - '0');
    if (i < text.size() && !is_separator(text[i])) {
      size_t end = i;
      while (end < text.size() && end - start < 20 && !is_separator(text[end])) ++end;
      SHAMN_INPUT_CHECK(false, "'", source, "' offset ", start,
                        ": expected a token id (a decimal number), found '", text.substr(start, end - start),
                        "'");
    }
    SHAMN_INPUT_CHECK(id < static_cast<uint64_t>(tok.vocab_size()), "'", source, "' offset ", start,
                      ": token id ", text.substr(start, i - start), " is >= the vocab_size ",
                      tok.vocab_size(), " of tokenizer '", a.tokenizer, "'");
    ids.push_back(static_cast<uint32_t>(id));
  }
  const std::string bytes = tok.decode(ids);
  write_stdout(bytes);
}

void run_prepare(const PrepareArgs& a) {
  const Tokenizer tok = Tokenizer::load(a.tokenizer);
  const std::string text = read_input(a.input);
  const PrepareSummary s = prepare_token_files(text, a.input, tok, a.out, a.val_fraction);
  const char* unit = s.by_line ? "lines (too few paragraphs)" : "paragraphs";
  std::printf("%" PRId64 " %s; val takes 1 in %.4g: %" PRId64 ", %.2f%% of the bytes\n", s.blocks, unit,
              1.0 / a.val_fraction, s.val_blocks,
              100.0 * static_cast<double>(s.val_bytes) / static_cast<double>(text.size()));
  std::printf("%s/train.bin: %" PRId64 " tokens (%" PRId64 " bytes, %.3f bytes/token)\n", a.out.c_str(),
              s.train_tokens, s.train_bytes, ratio(s.train_bytes, s.train_tokens));
  std::printf("%s/val.bin: %" PRId64 " tokens (%" PRId64 " bytes, %.3f bytes/token)\n", a.out.c_str(),
              s.val_tokens, s.val_bytes, ratio(s.val_bytes, s.val_tokens));
}

}  // namespace

void register_tokenizer_commands(CLI::App& app) {
  CLI::App* tc = app.add_subcommand("tokenizer", "train and run the byte-level BPE tokenizer");
  tc->require_subcommand(1);

  auto train = std::make_shared<TrainArgs>();
  CLI::App* trc = tc->add_subcommand("train", "learn BPE merges from a text file");
  trc->add_option("--input", train->input, "training text (raw bytes)")->required()->check(CLI::ExistingFile);
  trc->add_option("--vocab", train->vocab, "vocabulary size (256 bytes + merges)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{256}, kMaxVocabSize));
  trc->add_option("-o,--out", train->out, "tokenizer file to write")->required();
  trc->callback([train] { run_train(*train); });

  auto encode = std::make_shared<CodecArgs>();
  CLI::App* ec = tc->add_subcommand("encode", "print the token ids of a text, space-separated");
  ec->add_option("--tokenizer", encode->tokenizer, "tokenizer file")->required();
  ec->add_option("--input", encode->input, "text to encode (default: stdin)");
  ec->callback([encode] { run_encode(*encode); });

  auto decode = std::make_shared<CodecArgs>();
  CLI::App* dc = tc->add_subcommand("decode", "write the bytes of whitespace-separated token ids");
  dc->add_option("--tokenizer", decode->tokenizer, "tokenizer file")->required();
  dc->add_option("--input", decode->input, "token ids (default: stdin)");
  dc->callback([decode] { run_decode(*decode); });

  auto prepare = std::make_shared<PrepareArgs>();
  CLI::App* pc =
      app.add_subcommand("prepare", "tokenize a text into OUT/train.bin and OUT/val.bin (llm.c token files)");
  pc->add_option("--input", prepare->input, "text file")->required()->check(CLI::ExistingFile);
  pc->add_option("--tokenizer", prepare->tokenizer, "tokenizer file")->required();
  pc->add_option("--out", prepare->out, "output directory (created if missing)")->required();
  pc->add_option("--val-fraction", prepare->val_fraction,
                 "share of paragraphs held out for validation, in (0, 0.5]")
      ->capture_default_str();
  pc->callback([prepare] { run_prepare(*prepare); });
}

}  // namespace shamn::cli
