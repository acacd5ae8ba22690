// Tokenizer::load and Tokenizer::save: the text format documented in tokenizer.h.

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/read_file.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace shamn {

namespace {

constexpr std::string_view kMagic = "shamn-bpe 1";

// A line as the error message shows it: at most 40 bytes, control and
// non-ASCII bytes as \xHH.
std::string shown(std::string_view line) {
  std::string out = "'";
  for (size_t i = 0; i < line.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02X", c);
      out += hex;
    }
  }
  if (line.size() > 40) out += "...";
  out += '\'';
  return out;
}

// Whole-field decimal: digits only, no sign, no spaces, fits in uint64.
bool parse_number(std::string_view s, uint64_t& value) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return std::from_chars(s.data(), s.data() + s.size(), value).ec == std::errc();
}

class LineReader {
 public:
  LineReader(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  // The next line without its '\n'; false at the end of the file.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    ++number_;
    const size_t nl = text_.find('\n', pos_);
    SHAMN_INPUT_CHECK(
        nl != std::string_view::npos, where(),
        "the last line does not end in a newline (truncated file?): ", shown(text_.substr(pos_)));
    line = text_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    SHAMN_INPUT_CHECK(!line.ends_with('\r'), where(),
                      "the line ends in \\r\\n (Windows line endings); tokenizer files use \\n");
    return true;
  }
  int64_t number() const { return number_; }
  // "FILE:LINE: " for the line just read.
  std::string where() const { return detail::concat(path_, ":", number_, ": "); }
  std::string where_next() const { return detail::concat(path_, ":", number_ + 1, ": "); }

 private:
  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
  int64_t number_ = 0;
};

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  return parse(read_whole_file(path, "tokenizer file"), path);
}

Tokenizer Tokenizer::parse(const std::string& text, const std::string& path) {
  LineReader lines(path, text);
  std::string_view line;

  SHAMN_INPUT_CHECK(lines.next(line), path,
                    ":1: empty file; expected the header 'shamn-bpe 1' (is this a shamn tokenizer?)");
  SHAMN_INPUT_CHECK(!(line.starts_with("shamn-bpe ") && line != kMagic), lines.where(), "unsupported format ",
                    shown(line), "; this build reads 'shamn-bpe 1'");
  SHAMN_INPUT_CHECK(line == kMagic, lines.where(), "expected the header 'shamn-bpe 1', found ", shown(line),
                    " (is this a shamn tokenizer?)");

  SHAMN_INPUT_CHECK(lines.next(line), lines.where_next(),
                    "file ends before the line 'vocab_size N' (truncated file?)");
  uint64_t vocab = 0;
  SHAMN_INPUT_CHECK(line.starts_with("vocab_size ") && parse_number(line.substr(11), vocab), lines.where(),
                    "expected 'vocab_size N' with N a decimal number, found ", shown(line));
  SHAMN_INPUT_CHECK(vocab >= 256 && vocab <= static_cast<uint64_t>(kMaxVocabSize), lines.where(),
                    "vocab_size ", vocab, " is outside [256, ", kMaxVocabSize, "]");

  const size_t n_merges = vocab - 256;
  std::vector<Merge> merges;
  // Reserve what the text can hold (a merge line is at least 4 bytes), not what
  // vocab_size claims: a 30-byte file may say 16M merges.
  const size_t capacity = std::min<size_t>(n_merges, text.size() / 4);
  merges.reserve(capacity);
  std::unordered_map<uint64_t, int64_t> seen;  // pair -> line
  // Bytes each id stands for. A merge of two long tokens doubles the length, so
  // without a bound a 40-line file would make a token of 2^40 bytes.
  std::vector<size_t> length(256, 1);
  length.reserve(256 + capacity);
  while (merges.size() < n_merges) {
    SHAMN_INPUT_CHECK(lines.next(line), lines.where_next(), "file ends after ", merges.size(),
                      " merges, but vocab_size ", vocab, " needs ", n_merges,
                      " (truncated file or wrong vocab_size?)");
    const size_t space = line.find(' ');
    uint64_t left = 0, right = 0;
    SHAMN_INPUT_CHECK(space != std::string_view::npos && parse_number(line.substr(0, space), left) &&
                          parse_number(line.substr(space + 1), right),
                      lines.where(), "expected a merge 'LEFT RIGHT' (two decimal ids), found ", shown(line));
    const uint64_t id = 256 + merges.size();
    SHAMN_INPUT_CHECK(left < id && right < id, lines.where(), "merge ", merges.size(), " (", left, " ", right,
                      ") makes id ", id, ", so it may only use ids below ", id);
    const auto [it, fresh] = seen.emplace((left << 32) | right, lines.number());
    SHAMN_INPUT_CHECK(fresh, lines.where(), "merge (", left, " ", right, ") repeats the merge on line ",
                      it->second);
    // Encoding merges only inside pre-tokenized chunks, so no longer token can ever apply
    // (and training never makes one).
    length.push_back(length[left] + length[right]);
    SHAMN_INPUT_CHECK(length.back() <= kMaxChunkBytes, lines.where(), "merge ", merges.size(), " (", left,
                      " ", right, ") makes a token of ", length.back(), " bytes, longer than the ",
                      kMaxChunkBytes, "-byte chunks text is encoded in");
    merges.push_back({static_cast<uint32_t>(left), static_cast<uint32_t>(right)});
  }
  SHAMN_INPUT_CHECK(!lines.next(line), lines.where(), "unexpected line ", shown(line), " after the ",
                    n_merges, " merges that vocab_size ", vocab, " calls for (wrong vocab_size?)");
  return Tokenizer(std::move(merges));
}

std::string Tokenizer::to_text() const {
  std::string text = detail::concat(kMagic, "\nvocab_size ", vocab_size(), "\n");
  for (const Merge& m : merges_) {
    text += std::to_string(m.left);
    text += ' ';
    text += std::to_string(m.right);
    text += '\n';
  }
  return text;
}

void Tokenizer::save(const std::string& path) const { write_file_atomically(path, to_text(), "tokenizer"); }

}  // namespace shamn
