#pragma once
// Seeded texts for the tokenizer tests: English-like prose (words, numbers,
// punctuation, UTF-8, paragraphs) and raw bytes of any value.
#include <cctype>
#include <cstdint>
#include <random>
#include <string>

namespace shamn::test {

// Sentences of common words, some capitalised, numbers, quotes, UTF-8 words;
// a sentence per line and a blank line between paragraphs, like the Brown text.
inline std::string prose(size_t bytes, uint32_t seed) {
  static const char* const kWords[] = {
      "the",   "of",     "and",    "to",       "a",       "in",    "that",   "is",        "was",   "he",
      "for",   "it",     "with",   "as",       "his",     "on",    "be",     "at",        "by",    "had",
      "jury",  "said",   "county", "election", "city",    "state", "would",  "there",     "their", "which",
      "about", "people", "café",   "naïve",    "über",    "señor", "résumé", "Zürich",    "don't", "it's",
      "money", "twenty", "school", "tax",      "program", "new",   "years",  "government"};
  static const char* const kPunct[] = {",", ",", ";", ":", " -", "", "", ""};
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::string out;
  while (out.size() < bytes) {
    const size_t sentences = 1 + pick(5);
    for (size_t s = 0; s < sentences; ++s) {
      const size_t words = 3 + pick(15);
      for (size_t w = 0; w < words; ++w) {
        if (w > 0) out += ' ';
        if (pick(12) == 0) {
          out += std::to_string(rng() % (pick(2) ? 100 : 1000000));
        } else {
          std::string word = kWords[pick(std::size(kWords))];
          if (w == 0 || pick(10) == 0)
            word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
          if (pick(15) == 0) word = "\"" + word + "\"";
          out += word;
        }
        out += kPunct[pick(std::size(kPunct))];
      }
      out += pick(6) == 0 ? "?" : ".";
      out += '\n';
    }
    out += '\n';
  }
  return out;
}

// Bytes of every value, skewed towards a few (0, 0xFF, '\r', ' ', 'a', invalid
// UTF-8 lead bytes) so that trained merges cover them.
inline std::string random_bytes(size_t n, uint32_t seed) {
  static const unsigned char kFavourites[] = {0x00, 0xFF, '\r', '\n', ' ', 'a',  'b', '7',
                                              0xC3, 0xE2, 0x80, 0xBF, '.', '\t', 0x01};
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out)
    c = static_cast<char>(rng() % 2 ? kFavourites[rng() % std::size(kFavourites)] : rng() % 256);
  return out;
}

}  // namespace shamn::test
