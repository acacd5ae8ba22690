#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "data/pretokenize.h"
#include "data/text_samples.h"
#include "data/tokenizer.h"
#include "helpers.h"

using namespace shamn;

namespace {

// The slow, obvious encoder: in each chunk, merge the adjacent pair with the
// lowest merge rank (the leftmost one on a tie) until no pair is a merge.
std::vector<uint32_t> reference_encode(const std::vector<Merge>& merges, std::string_view text) {
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> rank;
  for (uint32_t i = 0; i < merges.size(); ++i)
    rank.emplace(std::make_pair(merges[i].left, merges[i].right), i);
  std::vector<uint32_t> out;
  for (std::string_view chunk : pretokenize(text)) {
    std::vector<uint32_t> s;
    for (char c : chunk) s.push_back(static_cast<unsigned char>(c));
    for (;;) {
      size_t best = s.size();
      uint32_t best_rank = 0;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const auto it = rank.find({s[i], s[i + 1]});
        if (it != rank.end() && (best == s.size() || it->second < best_rank)) {
          best = i;
          best_rank = it->second;
        }
      }
      if (best == s.size()) break;
      s[best] = 256 + best_rank;
      s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

// The slow, obvious trainer: recount every pair of every distinct chunk before
// each merge, take the largest count (smallest pair on a tie), merge it
// left to right everywhere.
std::vector<Merge> reference_train(std::string_view text, int64_t vocab_size) {
  std::map<std::string_view, int64_t> chunk_counts;
  for (std::string_view c : pretokenize(text)) ++chunk_counts[c];
  std::vector<std::pair<std::vector<uint32_t>, int64_t>> words;
  for (const auto& [chunk, count] : chunk_counts)
    words.push_back({std::vector<uint32_t>(chunk.begin(), chunk.end()), count});
  for (auto& w : words)
    for (uint32_t& s : w.first) s &= 0xFF;  // chars were signed
  std::vector<Merge> merges;
  while (256 + static_cast<int64_t>(merges.size()) < vocab_size) {
    std::map<std::pair<uint32_t, uint32_t>, int64_t> pairs;
    for (const auto& [s, count] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += count;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // map order: the first maximum is the smallest pair
    const uint32_t id = 256 + static_cast<uint32_t>(merges.size());
    merges.push_back({best->first.first, best->first.second});
    for (auto& [s, count] : words) {
      std::vector<uint32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best->first.first && s[i + 1] == best->first.second) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = out;
    }
  }
  return merges;
}

const Tokenizer& prose_tokenizer() {
  static const Tokenizer tok = Tokenizer::train(test::prose(300000, 1), 1000);
  return tok;
}

const Tokenizer& bytes_tokenizer() {
  static const Tokenizer tok = Tokenizer::train(test::random_bytes(200000, 2), 600);
  return tok;
}

}  // namespace

TEST_CASE("BPE training gives the merges worked out by hand", "[tokenizer]") {
  // Chunks "ab" " ab" " ab" " abc": (a b) occurs 4 times, then (' ' ab) 3 times,
  // then (' ab' c) once; after that every chunk is one token.
  const Tokenizer t = Tokenizer::train("ab ab ab abc", 300);
  CHECK(t.merges() == std::vector<Merge>{{'a', 'b'}, {' ', 256}, {257, 'c'}});
  CHECK(t.vocab_size() == 259);
  CHECK(t.token_bytes(258) == " abc");
  CHECK(Tokenizer::train("ab ab ab abc", 257).merges() == std::vector<Merge>{{'a', 'b'}});
  CHECK(Tokenizer::train("ab ab ab abc", 256).merges().empty());

  // Ties go to the smallest (left, right): chunks "xy" " yx" hold (x y), (' ' y),
  // (y x) once each; (' ' y) = (32, 121) is smallest; then (x y) beats (256 x).
  CHECK(Tokenizer::train("xy yx", 300).merges() == std::vector<Merge>{{' ', 'y'}, {'x', 'y'}, {256, 'x'}});

  // Chunks "aaaa" " aaaa": (a a) 6 times; merged left to right each becomes
  // two 256s, so (256 256) follows with 2, ahead of (' ' 256) with 1.
  CHECK(Tokenizer::train("aaaa aaaa", 258).merges() == std::vector<Merge>{{'a', 'a'}, {256, 256}});

  CHECK_THROWS_AS(Tokenizer::train("abc", 255), InputError);
}

TEST_CASE("BPE training matches the slow reference trainer", "[tokenizer]") {
  const std::string prose = test::prose(60000, 11);
  CHECK(Tokenizer::train(prose, 700).merges() == reference_train(prose, 700));
  // Many distinct chunks, many ties.
  const std::string bytes = test::random_bytes(20000, 12);
  CHECK(Tokenizer::train(bytes, 500).merges() == reference_train(bytes, 500));
  // Long runs: overlapping pairs and chunks cut at kMaxChunkBytes.
  const std::string runs = std::string(300, 'a') + " " + std::string(77, 'a') + "b" + std::string(130, ' ') +
                           "ababab abab" + std::string(9, '7');
  CHECK(Tokenizer::train(runs, 400).merges() == reference_train(runs, 400));
}

TEST_CASE("encode matches the slow reference encoder", "[tokenizer]") {
  for (const Tokenizer* tok : {&prose_tokenizer(), &bytes_tokenizer()}) {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const std::string text =
          seed % 2 ? test::prose(3000 + seed * 100, 100 + seed) : test::random_bytes(3000, 200 + seed);
      INFO("seed " << seed << ", vocab " << tok->vocab_size());
      REQUIRE(tok->encode(text) == reference_encode(tok->merges(), text));
    }
  }
}

TEST_CASE("decode(encode(x)) == x for any bytes", "[tokenizer]") {
  std::mt19937 rng(3);
  for (const Tokenizer* tok : {&prose_tokenizer(), &bytes_tokenizer()}) {
    for (int trial = 0; trial < 60; ++trial) {
      const size_t n = trial < 5 ? static_cast<size_t>(trial) : rng() % 10001;
      const std::string text = trial % 3 == 2 ? test::prose(n, trial) : test::random_bytes(n, trial);
      REQUIRE(tok->decode(tok->encode(text)) == text);
    }
    const std::string text = test::prose(100000, 9);
    const std::vector<uint32_t> ids = tok->encode(text);
    REQUIRE(tok->decode(ids) == text);
    for (uint32_t id : ids) REQUIRE(id < tok->vocab_size());
  }
  // Merges learnt from prose compress prose.
  const std::string text = test::prose(100000, 10);
  CHECK(static_cast<double>(text.size()) / prose_tokenizer().encode(text).size() > 3.0);
}

TEST_CASE("decode rejects ids outside the vocabulary", "[tokenizer]") {
  const Tokenizer& tok = prose_tokenizer();
  const std::vector<uint32_t> ids{72, 105, static_cast<uint32_t>(tok.vocab_size())};
  CHECK_THROWS_WITH(tok.decode(ids),
                    Catch::Contains("token id 1000 at index 2") && Catch::Contains("vocab_size 1000"));
  CHECK_THROWS_AS(tok.token_bytes(5000), InputError);
  CHECK(tok.token_bytes(65) == "A");
}

TEST_CASE("a model's token ids past the tokenizer stand for no text", "[tokenizer]") {
  const Tokenizer tok({{'a', 'b'}});  // 257 tokens; a model may round its vocabulary up
  CHECK(tok.model_token_bytes(256) == "ab");
  CHECK(tok.model_token_bytes(257).empty());
  CHECK(tok.model_token_bytes(-1).empty());
  CHECK(tok.model_text({'c', 257, 256, 300, 'd'}) == "cabd");
}

TEST_CASE("training and encoding do not depend on the thread count", "[tokenizer]") {
  test::ThreadCountGuard guard;
  // Several 1 MB counting blocks and 512 KB encoding blocks.
  const std::string text = test::prose(2600000, 4);
  set_num_threads(1);
  const Tokenizer one = Tokenizer::train(text, 2000);
  const std::vector<uint32_t> ids_one = one.encode(text);
  set_num_threads(2);
  const Tokenizer two = Tokenizer::train(text, 2000);
  const std::vector<uint32_t> ids_two = two.encode(text);
  CHECK(one.merges() == two.merges());
  CHECK(one.vocab_size() == 2000);
  CHECK(ids_one == ids_two);
  CHECK(two.decode(ids_two) == text);
}
