#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/pretokenize.h"

using namespace shamn;

namespace {

std::vector<std::string> chunks_of(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view c : pretokenize(text)) out.emplace_back(c);
  return out;
}

using Chunks = std::vector<std::string>;

}  // namespace

TEST_CASE("pretokenize follows the documented rules", "[tokenizer][pretokenize]") {
  CHECK(chunks_of("") == Chunks{});
  CHECK(chunks_of("Hello world") == Chunks{"Hello", " world"});
  CHECK(chunks_of("a  b") == Chunks{"a", " ", " b"});
  CHECK(chunks_of("x\n\ny") == Chunks{"x", "\n\n", "y"});
  CHECK(chunks_of("x\n y") == Chunks{"x", "\n", " y"});
  CHECK(chunks_of("x \ny") == Chunks{"x", " \n", "y"});
  CHECK(chunks_of("end.  ") == Chunks{"end", ".", "  "});
  CHECK(chunks_of(" (hi), \"you\".") == Chunks{" (", "hi", "),", " \"", "you", "\"."});
  CHECK(chunks_of("12345 678 90x") == Chunks{"123", "45", " 678", " 90", "x"});
  CHECK(chunks_of("abc123def") == Chunks{"abc", "123", "def"});
  CHECK(chunks_of("don't") == Chunks{"don", "'", "t"});
  CHECK(chunks_of("caf\xC3\xA9 na\xC3\xAFve") == Chunks{"caf\xC3\xA9", " na\xC3\xAFve"});
  CHECK(chunks_of("a\r\nb") == Chunks{"a", "\r\n", "b"});
  CHECK(chunks_of(std::string("a\0\0b", 4)) == Chunks{"a", std::string("\0\0", 2), "b"});
  CHECK(chunks_of(" ") == Chunks{" "});
  CHECK(chunks_of("\t x") == Chunks{"\t", " x"});
}

TEST_CASE("pretokenize cuts long runs every kMaxChunkBytes bytes", "[tokenizer][pretokenize]") {
  const std::string letters(150, 'q');
  CHECK(chunks_of(letters) == Chunks{letters.substr(0, 64), letters.substr(64, 64), letters.substr(128)});
  // The leading space counts towards the first chunk's 64 bytes.
  const std::string spaced = ' ' + letters;
  CHECK(chunks_of(spaced) == Chunks{spaced.substr(0, 64), letters.substr(63, 64), letters.substr(127)});
  // A whitespace run cut by the cap keeps its last space for the word after it.
  const std::string spaces(70, ' ');
  CHECK(chunks_of(spaces + "x") == Chunks{spaces.substr(0, 64), spaces.substr(0, 5), " x"});
}

TEST_CASE("chunks tile the text, blocks cut at sure chunk starts pre-tokenize alike",
          "[tokenizer][pretokenize]") {
  // Few distinct bytes, so that every class boundary and long runs occur often.
  const char alphabet[] = {' ', ' ', ' ', '\n', '\t', 'a', 'b', '\xC3', '1', '2', '.', ',', '\0'};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = rng() % 3000;
    std::string text(n, ' ');
    const bool long_runs = trial % 3 == 0;
    for (size_t i = 0; i < n; ++i)
      text[i] = long_runs && i > 0 && rng() % 20 != 0 ? text[i - 1] : alphabet[rng() % sizeof(alphabet)];
    const std::vector<std::string_view> chunks = pretokenize(text);
    std::set<size_t> starts;
    std::string joined;
    for (std::string_view c : chunks) {
      REQUIRE(!c.empty());
      REQUIRE(c.size() <= kMaxChunkBytes);
      starts.insert(joined.size());
      joined += c;
    }
    REQUIRE(joined == text);
    for (size_t pos = 1; pos < n; ++pos)
      if (is_sure_chunk_start(text, pos)) REQUIRE(starts.count(pos) == 1);

    const std::vector<size_t> cuts = split_into_blocks(text, 1 + rng() % 200);
    REQUIRE(cuts.front() == 0);
    REQUIRE(cuts.back() == n);
    std::vector<std::string_view> by_block;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      REQUIRE(cuts[k] < cuts[k + 1]);
      for (std::string_view c : pretokenize(std::string_view(text).substr(cuts[k], cuts[k + 1] - cuts[k])))
        by_block.push_back(c);
    }
    REQUIRE(by_block.size() == chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) REQUIRE(by_block[i].data() == chunks[i].data());
  }
}
